"""A stand-in for the 2.x ledger server with --tasks that breaks one rule: its Tasks sit outside the idempotency
layer (P24 puts them inside), so each keyed call that declares the extension gets a task of its own before any key
is looked at. A client whose CreateTaskResult was lost sends the call again and gets another task id: not the
handle the first call produced (S2). The key still guards the charge inside each task's work, so one task
charges and the other ends failed, its key in progress or replayed: which one the client polls is luck."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp_idempotency.layer import Idempotency
from mcp_idempotency_demo import ledger_server


class MakesATaskPerCall(Idempotency):
    """The layer, moved behind the Tasks middleware that ledger_server.with_tasks put after it."""

    @asynccontextmanager
    async def lifespan(self, server: Any) -> AsyncIterator[Idempotency]:
        # MCPServer.middleware is the SDK's public chain, outermost first: the layer and the Tasks
        # middleware after it trade places, so Tasks answers a declaring call before the layer sees it.
        chain = server.middleware
        at = chain.index(self)
        chain[at : at + 2] = [chain[at + 1], self]
        async with super().lifespan(server) as opened:
            yield opened


ledger_server.main(MakesATaskPerCall)
