"""How both demos print their walkthrough: who says what, and the server's lines as it writes them.

client_demo.py (mcp 1.x) and mcp_idempotency/demo/ledger_demo.py (mcp 2.x) speak to their SDKs
each in its own way; what they print, and how, is the same, so it is here, once.
"""

from pathlib import Path

import anyio  # both SDKs ship it

LOG_POLL = 0.01  # seconds between looks at the server's log, so its lines show as they happen
HELPERS = {"get_balance", "reset_ledger"}  # the demo's own calls: narrated in a line of their own


def say(who: str, text: str) -> None:
    """One line of the walkthrough, attributed to client, server, link, ledger or an instance."""
    print(f"  {who:<7}{text}", flush=True)


def short(key: str) -> str:
    """A key as the narration shows it: its first 8 characters. The frames show it whole."""
    return key[:8] + "…"


def verdict(ok: bool, claim: str) -> bool:
    """Print PASS or FAIL for one scenario's claim, and return whether it held."""
    print(f"  {'PASS' if ok else 'FAIL'}   {claim}\n", flush=True)
    return ok


class ServerLog:
    """The server's stderr, in a file: its decision lines, printed in the order it writes them."""

    def __init__(self, path: Path, who: str = "server"):
        self.path, self.who = path, who
        self.seen = 0  # how much of the file has been printed
        self.keys: set[str] = set()  # keys the client sent, to shorten in the server's lines

    def show(self) -> None:
        """Print the decision lines written since the last look, keys shortened."""
        with self.path.open() as log:
            log.seek(self.seen)
            text = log.read()
            self.seen = log.tell()
        for line in text.splitlines():
            # The server's own decisions, not SDK chatter, and not about the demo's helper calls.
            if line.startswith("idempotency: ") and not line.endswith(tuple(f"tool={name}" for name in HELPERS)):
                line = line.removeprefix("idempotency: ")
                for key in self.keys:
                    line = line.replace(repr(key), short(key))
                say(self.who, line)

    async def follow(self) -> None:
        """Show the server's lines as it writes them, not only when a frame comes back."""
        while True:
            self.show()
            await anyio.sleep(LOG_POLL)
