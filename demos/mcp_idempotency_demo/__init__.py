"""The demo: a ledger whose charge must not happen twice, its server, the clients that play it, and an issuer."""
