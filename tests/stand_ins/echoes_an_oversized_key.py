"""A stand-in for the 2.x ledger server that breaks one rule: it takes keys of up to two million characters
(P2: 1 to 255), so a one-megabyte key is valid to it, and the conflict it answers that key with echoes
the megabyte back (error.data.idempotencyKey). Its first answer to the key is small: only the conflict
path shows it. Its capability still says 255, as the layer's does, which it no longer honours."""

from mcp_idempotency import rules
from mcp_idempotency.demo import ledger_server

rules.MAX_KEY_LENGTH = 2 * 1024 * 1024  # read by rules.checked_key on every call
ledger_server.main()
