"""A stand-in for the 2.x ledger server that breaks one rule: its records outlive any window, whatever --retention
says (R1, P8: state is kept for a bounded window), so a key replays for a century and the store only fills."""

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from mcp_idempotency.demo import ledger_server
from mcp_idempotency.layer import Idempotency, Principal, one_tenant
from mcp_idempotency.stores import Limits

CENTURY = 100 * 365 * 24 * 60 * 60.0  # as good as no window


class NeverForgetsAKey(Idempotency):
    """The layer, its store opened with a retention of a century."""

    def __init__(
        self,
        store: str,
        *,
        server_info: Mapping[str, str],
        limits: Limits = Limits(),
        principal: Callable[[], Principal] = one_tenant,
        **rest: Any,
    ):
        super().__init__(
            store,
            server_info=server_info,
            limits=dataclasses.replace(limits, retention=CENTURY),
            principal=principal,
            **rest,
        )


ledger_server.main(NeverForgetsAKey)
