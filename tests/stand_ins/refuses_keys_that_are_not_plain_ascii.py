"""A stand-in for the 2.x ledger server that breaks one rule: it takes only printable ASCII keys, as a server
that stores keys in an ASCII column or logs them on one line might, and refuses the rest as invalid (W3, P2:
the key is an opaque string; an emoji, a NUL or a newline inside is a key like any other)."""

from collections.abc import Mapping
from typing import Any

from mcp_idempotency.layer import Idempotency, rejection
from mcp_idempotency.rules import INVALID_KEY
from mcp_idempotency_demo import ledger_server


def plain_ascii(key: str) -> bool:
    """Every character printable ASCII: ! to ~."""
    return all("!" <= character <= "~" for character in key)


class RefusesKeysThatAreNotPlainAscii(Idempotency):
    """The layer, with a format imposed on keys before they are read."""

    def _key_of(self, params: Mapping[str, Any]) -> str | None:
        key = params.get("idempotencyKey")
        if isinstance(key, str) and not plain_ascii(key):
            raise rejection(INVALID_KEY, None, "a key is printable ASCII")
        return super()._key_of(params)


ledger_server.main(RefusesKeysThatAreNotPlainAscii)
