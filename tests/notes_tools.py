"""What the notes servers of the tests share (spawning_server.py, unit_of_work_server.py, hanging_server.py): a
table of notes in the layer's store, and a tool that counts them, the ledger a test reads its effects from."""

from typing import Any

from mcp_idempotency.layer import Idempotency

NOTES = "CREATE TABLE IF NOT EXISTS notes (text TEXT NOT NULL)"


def counted(mcp: Any, keys: Idempotency) -> None:
    """Give `mcp` the `notes` tool: how many notes the store holds, read in a unit of work of its own."""

    @mcp.tool()
    async def notes() -> dict[str, int]:
        """How many notes were written."""
        async with keys.transaction() as tx:
            row = await tx.fetchone("SELECT count(*) FROM notes")
        return {"notes": int(row[0]) if row else 0}
