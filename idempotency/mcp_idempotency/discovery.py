"""What a server declares to the client half: where it reads the key, and the limits a retry plans by."""

import mcp_types
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from .link import Connection, session_for
from .resend import Settings
from .rules import Placement, marked_argument, without_key

__all__ = ["Settings", "discover_settings", "model_facing"]


async def discover_settings(
    connection: Connection, version: str = mcp_types.LATEST_PROTOCOL_VERSION
) -> Settings | None:
    """What the server declares, read from server/discover as it came off the wire (the SDK's typed
    capabilities drop tools.idempotency); None when it declares nothing, or has no server/discover.
    A gateway that rewrites the handshake may hide a server's declaration: see call_tool."""
    async with session_for(connection) as session:
        try:
            discovered = await session.send_discover(version)
        except MCPError:  # a 2025 server: no server/discover, so nothing this client may rely on
            return None
        return Settings.from_capabilities(discovered.get("capabilities")) or await declared_arguments(session)


async def declared_arguments(session: ClientSession) -> Settings | None:
    """The argument placement, which advertises no capability: the tools whose schema marks a key property."""
    tools = (await session.list_tools()).tools
    marked = {tool.name: name for tool in tools if (name := marked_argument(tool.input_schema)) is not None}
    return Settings(Placement.ARGUMENT, key_arguments=marked) if marked else None


def model_facing(tools: list[mcp_types.Tool]) -> list[mcp_types.Tool]:
    """The tool list to give a model: each marked key property taken out, so the model never sees or fills it."""
    return [tool.model_copy(update={"input_schema": without_key(tool.input_schema)}) for tool in tools]
