"""What the stand-ins that break a rule by configuration alone share (not a stand-in itself): the layer, its
store opened with other limits than the command line set."""

from typing import Any

from mcp_idempotency.layer import Idempotency
from mcp_idempotency.stores import Limits


class ConfiguredOtherwise(Idempotency):
    """The layer, its limits as `configured` makes them: only what they decide changes."""

    def configured(self, limits: Limits) -> Limits:
        """The limits this stand-in's store keeps; each stand-in overrides it."""
        raise NotImplementedError

    def __init__(self, store: str, *, limits: Limits = Limits(), **settings: Any):
        super().__init__(store, limits=self.configured(limits), **settings)
