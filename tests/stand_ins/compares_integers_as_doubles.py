"""A stand-in for the 2.x ledger server that breaks one rule: it reads every number as a double before it
fingerprints, as JSON.parse does, and still takes the keyed call (where a server must refuse it): 9007199254740993
and 9007199254740992 are one request to it, and the second replays the first's result."""

from collections.abc import Mapping
from typing import Any

from mcp_idempotency.layer import Idempotency
from mcp_idempotency_demo import ledger_server


def as_doubles(value: Any) -> Any:
    """The value as a parser of doubles leaves it: every integer rounded to the nearest double."""
    if type(value) is int:
        return float(value) if abs(value) > 2**53 else value
    if type(value) is dict:
        return {name: as_doubles(item) for name, item in value.items()}
    if type(value) is list:
        return [as_doubles(item) for item in value]
    return value


class ComparesIntegersAsDoubles(Idempotency):
    """The layer, fingerprinting arguments whose large integers it has rounded first."""

    def _fingerprint(self, params: Mapping[str, Any]) -> bytes:
        return super()._fingerprint({**params, "arguments": as_doubles(params.get("arguments"))})


ledger_server.main(ComparesIntegersAsDoubles)
