"""Section 2's timing loop, run by each SDK's own interpreter: each server's own fingerprint against its SDK's parse.

    PYTHON benchmarks/fingerprint_timing.py < request.json > timings.json

bench.py runs it twice, with the mcp 1.x interpreter (.venv) and with the mcp 2.x
one (.venv-2x), so that each ratio is measured within one interpreter. It reads
{"repeats": N, "server": "server.py's path", "lines": [a tools/call line, ...]} on
stdin and writes {"sdk": "mcp 1.30.0", "timings": [{"fingerprint": [ns, ...],
"parse": [ns, ...], "blake2b": [ns, ...], "sha256": [ns, ...]}, ...]}, one entry per
line, the raw samples in the order they were taken.

The fingerprint timed is the function each server runs: under mcp 1.x, server.py's
own (SHA-256 over json.dumps), imported from the script, which builds its FastMCP
object and does not serve; under mcp 2.x, the package's mcp_idempotency.rules.fingerprint
(BLAKE2b over pydantic's JSON), as mcp_idempotency/layer.py calls it on ctx.params.
"""

import gc
import hashlib
import json
import sys
import time
from importlib.metadata import version

from reference import load_server

try:
    import mcp_types  # mcp 2.x only
except ImportError:
    mcp_types = None

if mcp_types is not None:
    from mcp_types.methods import validate_client_request

    from mcp_idempotency.rules import fingerprint as layer_fingerprint

    def sdk_parse(line: str):
        """The 2.x SDK's parse of one tools/call line, up to the handler's typed params."""
        # mcp 2.3.0: mcp/server/stdio.py:189 parses every line so (the HTTP transport its
        # body alike); mcp/server/runner.py _inner then validates the params against the
        # revision's surface (validate_client_request) and as the handler's params type,
        # CallToolRequestParams. The middleware runs between the first and the second.
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        revision = message.params["_meta"]["io.modelcontextprotocol/protocolVersion"]
        validate_client_request(message.method, revision, message.params)
        mcp_types.CallToolRequestParams.model_validate(message.params, by_name=False)
        return message

    def fingerprint(message, _server) -> bytes:
        """What mcp_idempotency/layer.py computes from ctx.params, the plain dict the SDK parsed."""
        return layer_fingerprint(message.params["name"], message.params.get("arguments"))

else:
    import mcp.types as types

    def sdk_parse(line: str):
        """The 1.x SDK's parsing and validation of one stdio line, before any handler runs."""
        # mcp/server/stdio.py:65 (1.9.4 and 1.30.0) parses each line, and
        # mcp/shared/session.py _receive_loop (1.30.0: 362-364, 1.9.4: 341-343)
        # validates a dump of it as the session's request type, which
        # mcp/server/session.py:96 (1.9.4: 90) makes types.ClientRequest.
        message = types.JSONRPCMessage.model_validate_json(line)
        return types.ClientRequest.model_validate(
            message.root.model_dump(by_alias=True, mode="json", exclude_none=True)
        ).root

    def fingerprint(request, server) -> bytes:
        """What server.py's dispatch layer computes from the parsed request: server.py's own function."""
        return server.fingerprint(request.params.name, request.params.arguments)


def timings(line: str, repeats: int, server) -> dict[str, list[int]]:
    """Nanoseconds of the fingerprint and of the SDK's parse, interleaved, `repeats` times; and of each digest alone."""
    samples = {"fingerprint": [], "parse": [], "blake2b": [], "sha256": []}
    data = line.encode()  # a digest's cost depends on the length alone: the line is as long as what is hashed
    # As in the server, each fingerprint reads the request the SDK has just
    # parsed, so neither measurement runs on a cache the other left cold.
    # The garbage collector is off while timing, as timeit does: a collection
    # lands on whichever call crosses its threshold, which is noise, not cost.
    # Parsed messages hold no cycles, so nothing waits for it meanwhile. Each
    # parse's time includes freeing the previous request, as the SDK frees each
    # request it parsed; the fingerprint's time includes freeing its own copy.
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.perf_counter_ns()
            request = sdk_parse(line)
            parsed = time.perf_counter_ns()
            fingerprint(request, server)
            fingerprinted = time.perf_counter_ns()
            hashlib.blake2b(data, digest_size=32).digest()  # the package's digest (rules.py)
            blake2b = time.perf_counter_ns()
            hashlib.sha256(data).digest()  # server.py's, the one the package's replaced
            samples["sha256"].append(time.perf_counter_ns() - blake2b)
            samples["blake2b"].append(blake2b - fingerprinted)
            samples["fingerprint"].append(fingerprinted - parsed)
            samples["parse"].append(parsed - start)
    finally:
        gc.enable()
    return samples


def main() -> None:
    request = json.load(sys.stdin)
    server = None if mcp_types is not None else load_server(request["server"])
    results = [timings(line, request["repeats"], server) for line in request["lines"]]
    json.dump({"sdk": f"mcp {version('mcp')}", "timings": results}, sys.stdout)


if __name__ == "__main__":
    main()
