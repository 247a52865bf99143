"""Test tools for P6': each gives one kind of outcome, added to a real server from outside.

tests/test_outcome_kinds.py starts server.py (mcp 1.x) and sdk2/server.py (mcp 2.x) with
this folder on PYTHONPATH. Python imports `sitecustomize` at start-up, before the
server's own code, so the server process, and no other, gets four more tools. The
demo's servers hold no test code: everything here wraps the SDK from outside.

    fails_as_a_tool      the tool raises an ordinary exception: the SDK answers isError
    raise_jsonrpc_error  a JSON-RPC error from the SDK's tool handling (-32099)
    fail_internally      an exception escapes the SDK's tools/call handler: nothing
                         below the dispatch layer answers it
    needs_browser_once   URL elicitation required (-32042) on its first run, then a
                         result naming the run: "completed on run 2"
    sheds_load_once      (mcp 2.x) an InputRequiredResult carrying only a requestState,
                         then, sent again with that state, a result

On mcp 1.x, FastMCP turns every exception of a tool into an isError result, except
UrlElicitationRequiredError: so the JSON-RPC error and the internal failure are raised by
a wrapper of its tools/call handler, put in place before server.py takes that handler
over. mcp 2.x passes any MCPError raised by a tool through as a JSON-RPC error, so there
the tools raise them themselves, and only the internal failure is a wrapper (of
MCPServer's own handler).
"""

runs = {"needs_browser_once": 0, "sheds_load_once": 0}

JSONRPC_ERROR = {"code": -32099, "message": "staged: the payment processor is unreachable", "data": {"retryable": True}}
SIGN_IN = {
    "mode": "url",
    "message": "Sign in to your bank",
    "url": "https://bank.example/sign-in",
    "elicitationId": "sign-in-1",
}


def fails_as_a_tool() -> str:
    """An ordinary failure inside the tool."""
    raise ValueError("staged: the card was declined")


def add_tools(server, raise_jsonrpc_error, needs_browser_once) -> None:
    """The test tools, listed in tools/list like any other."""
    for tool in (fails_as_a_tool, raise_jsonrpc_error, needs_browser_once):
        server.add_tool(tool, name=tool.__name__)
    server.add_tool(fails_as_a_tool, name="fail_internally")  # never reached: its call fails before the tool


def install_on_mcp1() -> None:
    """mcp 1.x: the tools, and a wrapper of FastMCP's tools/call handler for the JSON-RPC outcomes."""
    import mcp.types as types
    from mcp.server.fastmcp import FastMCP
    from mcp.shared.exceptions import McpError, UrlElicitationRequiredError

    def raise_jsonrpc_error() -> str:
        """Its error is raised by the wrapper below: FastMCP would turn it into isError."""
        return "not reached"

    def needs_browser_once() -> str:
        """URL elicitation required on the first run; a result from then on."""
        runs["needs_browser_once"] += 1
        if runs["needs_browser_once"] == 1:
            raise UrlElicitationRequiredError([types.ElicitRequestURLParams(**SIGN_IN)])
        return f"completed on run {runs['needs_browser_once']}"

    setup = FastMCP._setup_handlers

    def setup_with_staged_outcomes(self) -> None:
        setup(self)
        handler = self._mcp_server.request_handlers[types.CallToolRequest]

        async def staged(request: types.CallToolRequest) -> types.ServerResult:
            name = request.params.name
            if name == "fail_internally":
                raise RuntimeError("staged: the tools/call handler failed")
            if name == "raise_jsonrpc_error":
                raise McpError(types.ErrorData(**JSONRPC_ERROR))
            return await handler(request)

        self._mcp_server.request_handlers[types.CallToolRequest] = staged
        add_tools(self, raise_jsonrpc_error, needs_browser_once)

    FastMCP._setup_handlers = setup_with_staged_outcomes


def install_on_mcp2() -> None:
    """mcp 2.x: tools that raise their JSON-RPC errors, and a failing wrapper of MCPServer's handler."""
    import mcp_types
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError

    def raise_jsonrpc_error() -> str:
        """A JSON-RPC error raised by the tool: 2.x passes it through."""
        raise MCPError(**JSONRPC_ERROR)

    def needs_browser_once() -> str:
        """URL elicitation required on the first run; a result from then on."""
        runs["needs_browser_once"] += 1
        if runs["needs_browser_once"] == 1:
            raise UrlElicitationRequiredError([mcp_types.ElicitRequestURLParams(**SIGN_IN)])
        return f"completed on run {runs['needs_browser_once']}"

    def sheds_load_once(ctx: Context) -> str | mcp_types.InputRequiredResult:
        """The state-only input-required form (2026-07-28): "send this again, with this state"."""
        if ctx.request_state is None:
            return mcp_types.InputRequiredResult(request_state="shed")
        runs["sheds_load_once"] += 1
        return f"completed on run {runs['sheds_load_once']}"

    init, handle = MCPServer.__init__, MCPServer._handle_call_tool

    def init_with_test_tools(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        add_tools(self, raise_jsonrpc_error, needs_browser_once)
        self.add_tool(sheds_load_once, name="sheds_load_once")

    async def handle_failing_internally(self, ctx, params):
        if params.name == "fail_internally":
            raise RuntimeError("staged: the tools/call handler failed")
        return await handle(self, ctx, params)

    MCPServer.__init__, MCPServer._handle_call_tool = init_with_test_tools, handle_failing_internally


try:  # whichever SDK this interpreter has: the server imports it right after anyway
    install_on_mcp1()
except ImportError:
    install_on_mcp2()
