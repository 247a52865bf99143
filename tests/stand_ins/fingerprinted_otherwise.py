"""What the stand-ins whose fingerprint, or key, differs from the layer's share (not a stand-in itself): the layer
reads the key and fingerprints the params as `seen` makes them, and the tool still gets them as they were sent."""

from collections.abc import Mapping
from typing import Any

from mcp_idempotency.layer import Idempotency


class FingerprintedOtherwise(Idempotency):
    """The layer, shown other params than the tool gets: only what it decides from them changes."""

    def seen(self, params: dict[str, Any]) -> dict[str, Any]:
        """The params as this stand-in's layer reads them (key and fingerprint); each stand-in overrides it."""
        raise NotImplementedError

    def _key_of(self, params: Mapping[str, Any]) -> str | None:
        return super()._key_of(self.seen(dict(params)))

    def _fingerprint(self, params: Mapping[str, Any]) -> bytes:
        return super()._fingerprint(self.seen(dict(params)))
