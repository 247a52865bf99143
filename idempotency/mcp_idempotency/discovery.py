"""What a server declares to the client half: where it reads the key, and the limits a retry plans by."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import mcp_types
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from .link import Connection, session_for
from .rules import DEADLINE_SECONDS, DEFAULT_PLACEMENT, EXTENSION_ID, Placement, marked_argument, without_key
from .stores import LEASE_SECONDS

__all__ = ["Settings", "declared_arguments", "discover_settings", "model_facing"]


@dataclass(frozen=True)
class Settings:
    """What a server declares: where it reads the key, and its limits (None where it declares none)."""

    placement: Placement = DEFAULT_PLACEMENT
    max_key_length: int | None = None
    retention_seconds: float | None = None
    key_arguments: Mapping[str, str] = field(default_factory=dict)  # argument placement: tool -> marked property
    deadline_seconds: float | None = None  # how long a keyed run may take before the server ends it
    lease_seconds: float | None = None  # how long a holder that died keeps its key

    @classmethod
    def from_capabilities(cls, capabilities: object) -> "Settings | None":
        """The settings in capabilities as they came off the wire; None when neither placement is advertised."""
        if not isinstance(capabilities, dict):
            return None
        for placement, declared in (
            (Placement.PARAMS, (capabilities.get("tools") or {}).get("idempotency")),
            (Placement.META, (capabilities.get("extensions") or {}).get(EXTENSION_ID)),
        ):
            if isinstance(declared, dict):
                return cls(
                    placement,
                    positive(declared, "maxKeyLength"),
                    positive(declared, "retentionSeconds"),
                    deadline_seconds=positive(declared, "deadlineSeconds"),
                    lease_seconds=positive(declared, "leaseSeconds"),
                )
        return None

    def in_progress_at_most(self) -> float:
        """How long after a key's first attempt it may still be in progress: a live run is ended at its
        deadline, a dead holder's claim freed by its lease. Where the server declares neither, this
        package's own defaults, which a server built on it keeps unless told otherwise."""
        deadline = DEADLINE_SECONDS if self.deadline_seconds is None else self.deadline_seconds
        return deadline + (LEASE_SECONDS if self.lease_seconds is None else self.lease_seconds)


def positive(declared: dict[str, Any], name: str) -> int | None:
    """A setting a client can rely on: a whole number above zero; anything else is none."""
    value = declared.get(name)
    return value if type(value) is int and value > 0 else None


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

