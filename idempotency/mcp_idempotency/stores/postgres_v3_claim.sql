-- The claim function of schema version 3 (postgres.py creates it with the tables, and
-- again when it upgrades a version 2 store, whose function took no principal).
--
-- The order of checks, the window, the bounds, the atomic claim and the lease in one statement, so in one round trip and one transaction:
-- the record that holds the key, answered with no write; or the key claimed by one
-- atomic insert, or taken over once its deadline has passed. Every time here
-- is the database's clock, and clock_timestamp(), the time now, not now(), the
-- time the transaction began: a claim that waited is not born older than it is.
-- A key's row that exists is locked before anything else, and the count row only
-- for as long as it takes to add one: a claim that waits on a key (its holder
-- frozen before COMMIT) holds up no other key, its own principal's included.
-- Whether a record past its deadline may be
-- taken is `may_take` in mcp_idempotency/stores/__init__.py, written here twice in SQL
-- (the read, and the insert's WHERE, which re-decides atomically); the repository's
-- store tests check this function against it.
CREATE FUNCTION idempotency_claim(claim_key text, claim_principal text, claim_fingerprint bytea, claim_owner text,
                                  lease_seconds float8, max_records bigint, max_per_principal bigint)
RETURNS TABLE (status text, fingerprint bytea, outcome text) LANGUAGE plpgsql AS $$
DECLARE
    holder record;
    inserted boolean;
    live bigint;
    purged bigint;
BEGIN
    SELECT r.fingerprint, r.status, r.outcome, r.deadline <= clock_timestamp() AS passed INTO holder
    FROM idempotency_records r WHERE r.key = claim_key;
    IF FOUND AND holder.passed AND (holder.status = 'completed' OR holder.fingerprint = claim_fingerprint) THEN
        -- It may be taken: lock its row first, waiting on no other lock held, then
        -- read it again as it is now (its holder may have completed or renewed it).
        SELECT r.fingerprint, r.status, r.outcome, r.deadline <= clock_timestamp() AS passed INTO holder
        FROM idempotency_records r WHERE r.key = claim_key FOR UPDATE;
    END IF;
    IF FOUND AND NOT (holder.passed AND (holder.status = 'completed' OR holder.fingerprint = claim_fingerprint)) THEN
        RETURN QUERY SELECT 'held', holder.fingerprint, holder.outcome;  -- no write at all
        RETURN;
    END IF;
    -- The principal's records whose deadline is ahead, a walk of the share index alone
    -- that stops at the share. The key's own is not among them (it was free, or past its
    -- deadline, when read above) unless another claim took it since: then this one answers
    -- full where in progress was due, both "retry later", and the retry learns which.
    -- Its claims take turns on a lock of their own (advisory, two-key space, until COMMIT),
    -- so two of them never both see room for one; other principals' claims, and every
    -- replay, never wait for it. Locks come in one order: a key that exists, the
    -- principal, a new key (which only a claim holding the principal inserts), count.
    PERFORM pg_advisory_xact_lock(3182, hashtext(claim_principal));
    IF (SELECT count(*) FROM (SELECT 1 FROM idempotency_records r
                              WHERE r.principal = claim_principal AND r.deadline > clock_timestamp()
                              LIMIT max_per_principal) mine) >= max_per_principal THEN
        RETURN QUERY SELECT 'full', NULL::bytea, NULL::text;
        RETURN;
    END IF;
    -- The claim need not wait for the disk: its completion's commit, which waits,
    -- flushes the log up to itself, the claim's record included; and a claim lost
    -- in a crash was never told to anyone as an outcome (its completion is refused).
    PERFORM set_config('synchronous_commit', 'off', true);
    INSERT INTO idempotency_records AS r (key, principal, fingerprint, status, deadline, owner)
    VALUES (claim_key, claim_principal, claim_fingerprint, 'running',
            clock_timestamp() + make_interval(secs => lease_seconds), claim_owner)
    ON CONFLICT (key) DO UPDATE SET fingerprint = excluded.fingerprint, status = 'running',
                                    deadline = excluded.deadline, owner = excluded.owner, outcome = NULL
    WHERE r.deadline <= clock_timestamp() AND (r.status = 'completed' OR r.fingerprint = excluded.fingerprint)
    RETURNING r.xmax = 0 INTO inserted;  -- xmax = 0: a new row, not a reused one
    IF NOT FOUND THEN  -- another instance claimed it after our read: a new snapshot sees it
        RETURN QUERY SELECT 'held', r.fingerprint, r.outcome FROM idempotency_records r WHERE r.key = claim_key;
        RETURN;
    END IF;
    IF NOT inserted THEN
        RETURN QUERY SELECT 'won', claim_fingerprint, NULL::text;  -- a takeover or an expired key: no new row
        RETURN;
    END IF;
    UPDATE idempotency_record_count c SET n = c.n + 1 RETURNING c.n INTO live;
    IF live > max_records THEN  -- only a full store purges, oldest first, a batch at a time
        WITH gone AS (
            DELETE FROM idempotency_records r WHERE r.key IN (
                SELECT e.key FROM idempotency_records e WHERE e.status = 'completed' AND e.deadline <= clock_timestamp()
                ORDER BY e.deadline LIMIT 1000 FOR UPDATE SKIP LOCKED)
            RETURNING 1)
        SELECT count(*) INTO purged FROM gone;
        UPDATE idempotency_record_count c SET n = c.n - purged RETURNING c.n INTO live;
        IF live > max_records THEN  -- nothing left to purge: this key is refused, the purge kept
            DELETE FROM idempotency_records r WHERE r.key = claim_key;
            UPDATE idempotency_record_count c SET n = c.n - 1;
            RETURN QUERY SELECT 'full', NULL::bytea, NULL::text;
            RETURN;
        END IF;
    END IF;
    RETURN QUERY SELECT 'won', claim_fingerprint, NULL::text;
END
$$;
