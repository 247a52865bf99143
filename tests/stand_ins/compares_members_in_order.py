"""A stand-in for the 2.x ledger server that breaks one rule: its fingerprint keeps the order in which the
arguments' members arrived (E2: member order MUST NOT matter), so a retry from a client that builds the object
in another order, or through a proxy that re-serialises it, is a conflict instead of the replay."""

from typing import Any

from fingerprinted_otherwise import FingerprintedOtherwise

from mcp_idempotency_demo import ledger_server


def in_arrival_order(value: Any) -> Any:
    """Every object as a list of [name, value] pairs, in the order its members came: lists keep their order."""
    if type(value) is dict:
        return [[name, in_arrival_order(item)] for name, item in value.items()]
    if type(value) is list:
        return [in_arrival_order(item) for item in value]
    return value


class ComparesMembersInOrder(FingerprintedOtherwise):
    """The layer, fingerprinting the arguments as pairs in arrival order; numbers and strings as it does."""

    def seen(self, params: dict[str, Any]) -> dict[str, Any]:
        arguments = params.get("arguments")
        if not isinstance(arguments or {}, dict):
            return params  # not the SDK's shape: the layer leaves it to the SDK
        return {**params, "arguments": {"members in order": in_arrival_order(arguments or {})}}


ledger_server.main(ComparesMembersInOrder)
