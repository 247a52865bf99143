"""A stdio server behind a recorder: every line its client writes is appended to a file, then passed on unchanged.

    python tests/recording_stdio.py RECORD -- COMMAND...

What a client really puts on the wire, whatever its SDK: the server's answers and its stderr
go straight back (the child inherits them), and the recorder ends when the client closes stdin.
tests/test_schema.py checks the keyed requests of client_demo.py and mcp_idempotency/client.py recorded so.
"""

import subprocess
import sys


def relay(record: str, command: list[str]) -> int:
    """Run `command`, feeding it this process's stdin line by line and appending each line to `record`."""
    server = subprocess.Popen(command, stdin=subprocess.PIPE)
    with open(record, "ab") as recorded:
        for line in sys.stdin.buffer:
            recorded.write(line)
            recorded.flush()
            server.stdin.write(line)
            server.stdin.flush()
    server.stdin.close()  # the client went away: so does the server, as it would without the recorder
    return server.wait()


if __name__ == "__main__":
    split = sys.argv.index("--")
    sys.exit(relay(sys.argv[1], sys.argv[split + 1 :]))
