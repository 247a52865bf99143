"""A stand-in for the 2.x ledger server that breaks one rule: it is configured to take keys of up to two million
characters (P2: 1 to 255), so a one-megabyte key is valid to it, and the conflict it answers that key with echoes
the megabyte back (error.data.idempotencyKey), as the seed prototype did. Its first answer to the key is small:
only the conflict path shows it. Its capability says the length it takes, as the one setting makes it, so that
no MUST of the capability's settings is broken beside it."""

from dataclasses import replace

from configured_otherwise import ConfiguredOtherwise

from mcp_idempotency.stores import Limits
from mcp_idempotency_demo import ledger_server

LONGEST_KEY = 2 * 1024 * 1024


class EchoesAnOversizedKey(ConfiguredOtherwise):
    """The layer, taking keys far past 255 characters, and naming each as sent in every rejection, as it may a
    valid key."""

    def configured(self, limits: Limits) -> Limits:
        return replace(limits, max_key_length=LONGEST_KEY)


ledger_server.main(EchoesAnOversizedKey)
