-- The PostgreSQL store, schema version 4: the records, their count and each principal's,
-- nothing else (mcp_idempotency/stores/postgres.py runs this file and postgres_v4_claim.sql
-- once, in one transaction, on an empty database, and refuses any other version in one line).
-- Version 3 had no count per principal, and version 2 held the demo's ledger too and had no
-- principal column: `mcp-idempotency-store upgrade URL` brings either here in place
-- (postgres.py, `upgrade`), the ledger's table left to the demo (mcp_idempotency_demo/ledger.py).
-- Version 1 was the layout with NULL patterns across columns and a claim function that
-- locked the count row before the key's row.

CREATE TABLE idempotency_schema (
    version  integer NOT NULL
);
INSERT INTO idempotency_schema VALUES (4);

CREATE TABLE idempotency_records (
    key          text PRIMARY KEY,
    principal    text NOT NULL,         -- whose share it counts against; '' for nobody's
    fingerprint  bytea NOT NULL,
    status       text NOT NULL CHECK (status IN ('running', 'completed')),
    deadline     timestamptz NOT NULL,  -- running: when a retry may take over; completed: when it expires
    owner        text,                  -- running: the claim's token, so only it gives the key back
    outcome      text,                  -- completed: what is replayed; text, not jsonb, so it is the recorded bytes
    CHECK ((status = 'completed') = (outcome IS NOT NULL))
);
CREATE INDEX idempotency_records_expiry ON idempotency_records (deadline) WHERE status = 'completed';
CREATE INDEX idempotency_records_share ON idempotency_records (principal, deadline);  -- a principal's share

-- How many records there are, kept in step by the triggers of postgres_v4_claim.sql,
-- so that no claim has to count the table.
CREATE TABLE idempotency_record_count (
    id  integer PRIMARY KEY CHECK (id = 1),
    n   bigint NOT NULL
);
INSERT INTO idempotency_record_count VALUES (1, 0);
