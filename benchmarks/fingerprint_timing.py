"""Section 2's timing loop, run by each SDK's own interpreter: the fingerprint against that SDK's parse.

    PYTHON benchmarks/fingerprint_timing.py < request.json > timings.json

bench.py runs it twice, with the mcp 1.x interpreter (.venv) and with the mcp 2.x
one (.venv-2x), so that each ratio is measured within one interpreter. It reads
{"repeats": N, "lines": [a tools/call line, ...]} on stdin and writes
{"sdk": "mcp 1.30.0", "timings": [{"fingerprint": [ns, ...], "parse": [ns, ...]}, ...]},
one entry per line, the raw samples in the order they were taken.
"""

import gc
import json
import sys
import time
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sdk2"))
import sep3182  # noqa: E402  (SDK-free: both interpreters import the same rules)

try:
    import mcp_types  # mcp 2.x only
except ImportError:
    mcp_types = None

if mcp_types is not None:

    def sdk_parse(line: str):
        """The 2.x SDK's parse of one stdio line, before any middleware runs."""
        # mcp 2.3.0, mcp/server/stdio.py:189 parses every line so; the middleware then
        # reads the params as this plain dict (ctx.params). The handler's own params
        # validation comes later, so this is the least the SDK does per request.
        return mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)

    def fingerprint(message) -> bytes:
        """What sdk2/server.py's middleware computes from ctx.params."""
        return sep3182.fingerprint(message.params["name"], message.params.get("arguments"))

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
            message.root.model_dump(by_alias=True, mode="json", exclude_none=True)).root

    def fingerprint(request) -> bytes:
        """What server.py's dispatch layer computes from the parsed request."""
        return sep3182.fingerprint(request.params.name, request.params.arguments)


def timings(line: str, repeats: int) -> dict[str, list[int]]:
    """Nanoseconds of the fingerprint and of the SDK's parse, interleaved, `repeats` times."""
    samples = {"fingerprint": [], "parse": []}
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
            fingerprint(request)
            samples["fingerprint"].append(time.perf_counter_ns() - parsed)
            samples["parse"].append(parsed - start)
    finally:
        gc.enable()
    return samples


def main() -> None:
    request = json.load(sys.stdin)
    results = [timings(line, request["repeats"]) for line in request["lines"]]
    json.dump({"sdk": f"mcp {version('mcp')}", "timings": results}, sys.stdout)


if __name__ == "__main__":
    main()
