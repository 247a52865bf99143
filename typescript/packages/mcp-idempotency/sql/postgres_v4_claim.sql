-- Schema version 4's count of each principal's records, the triggers that keep both counts
-- in step, and the claim function (postgres.py runs this file after postgres_v4.sql, and
-- alone when it upgrades a version 3 store: the one table it adds, then the functions,
-- which replace version 3's claim).

-- How many records each principal has, live or expired: while that is within its share, so
-- are its live ones, and a claim need not walk them.
CREATE TABLE idempotency_shares (
    principal  text PRIMARY KEY,
    records    bigint NOT NULL
);

-- Both counts follow the rows, so every statement that inserts or deletes a record (a claim,
-- a purge, a release, forget, an operator's DELETE) keeps them right without remembering to.
-- Each trigger takes the principal's count row before the store's: every transaction takes
-- them in that order, so none waits on another for them in a circle.
CREATE OR REPLACE FUNCTION idempotency_records_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO idempotency_shares AS s VALUES (NEW.principal, 1)
    ON CONFLICT (principal) DO UPDATE SET records = s.records + 1;
    UPDATE idempotency_record_count SET n = n + 1;
    RETURN NULL;
END
$$;
CREATE TRIGGER idempotency_records_inserted AFTER INSERT ON idempotency_records
FOR EACH ROW EXECUTE FUNCTION idempotency_records_inserted();

-- Once for a statement, however many rows it deleted: a purge of a thousand records is one
-- update per principal, the row of one left at none removed.
CREATE OR REPLACE FUNCTION idempotency_records_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    gone bigint;
BEGIN
    SELECT count(*) INTO gone FROM deleted;
    IF gone = 0 THEN  -- a release that found nothing to give back locks no count
        RETURN NULL;
    END IF;
    UPDATE idempotency_shares s SET records = s.records - mine.records
    FROM (SELECT d.principal, count(*) AS records FROM deleted d GROUP BY d.principal) mine
    WHERE s.principal = mine.principal;
    DELETE FROM idempotency_shares s WHERE s.records = 0 AND s.principal IN (SELECT d.principal FROM deleted d);
    UPDATE idempotency_record_count SET n = n - gone;
    RETURN NULL;
END
$$;
CREATE TRIGGER idempotency_records_deleted AFTER DELETE ON idempotency_records
REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION idempotency_records_deleted();

-- The claim function.
--
-- The order of checks, the window, the bounds, the atomic claim and the lease in one statement, so in one round trip and one transaction:
-- the record that holds the key, answered with no write; or the key claimed by one
-- atomic insert, or taken over once its deadline has passed. Every time here
-- is the database's clock, and clock_timestamp(), the time now, not now(), the
-- time the transaction began: a claim that waited is not born older than it is.
-- A key's row that exists is locked before anything else, and the count rows only
-- from the insert on: a claim that waits on a key (its holder frozen before COMMIT)
-- holds up no other key, its own principal's included.
-- Whether a record past its deadline may be
-- taken is `may_take` in mcp_idempotency/stores/__init__.py, written here twice in SQL
-- (the read, and the insert's WHERE, which re-decides atomically); the repository's
-- store tests check this function against it.
CREATE OR REPLACE FUNCTION idempotency_claim(claim_key text, claim_principal text, claim_fingerprint bytea, claim_owner text,
                                  lease_seconds float8, max_records bigint, max_per_principal bigint)
RETURNS TABLE (status text, fingerprint bytea, outcome text) LANGUAGE plpgsql AS $$
DECLARE
    holder record;
    inserted boolean;
    live bigint;
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
    -- The principal's share: its claims take turns on a lock of their own (advisory,
    -- two-key space, until COMMIT), so two of them never both see room for one; other
    -- principals' claims, and every replay, never wait for it. Locks come in one order: a
    -- key that exists, the principal, a new key (which only a claim holding the principal
    -- inserts), the counts (the principal's, then the store's).
    PERFORM pg_advisory_xact_lock(3182, hashtext(claim_principal));
    -- Fewer records than its share, live or not: room, read in one row. Only a principal at
    -- its share loses its expired completed records (their window has passed, as the
    -- store's purge has it), oldest first, a batch at a time, skipping any another claim has
    -- locked; then its records whose deadline is ahead are walked in the share index, up to
    -- the share. The key's own is not among them (it was free, or past its deadline, when
    -- read above) unless another claim took it since: then this one answers full where in
    -- progress was due, both "retry later", and the retry learns which. (The purge takes
    -- the counts before a new key is inserted: no other claim inserts this principal's keys.)
    IF (SELECT s.records FROM idempotency_shares s WHERE s.principal = claim_principal) >= max_per_principal THEN
        DELETE FROM idempotency_records r WHERE r.key IN (
            SELECT e.key FROM idempotency_records e
            WHERE e.principal = claim_principal AND e.status = 'completed' AND e.deadline <= clock_timestamp()
            ORDER BY e.deadline LIMIT 1000 FOR UPDATE SKIP LOCKED);
        IF (SELECT count(*) FROM (SELECT 1 FROM idempotency_records r
                                  WHERE r.principal = claim_principal AND r.deadline > clock_timestamp()
                                  LIMIT max_per_principal) mine) >= max_per_principal THEN
            RETURN QUERY SELECT 'full', NULL::bytea, NULL::text;
            RETURN;
        END IF;
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
    SELECT c.n INTO live FROM idempotency_record_count c;  -- the insert's trigger counted it, and holds the row
    IF live > max_records THEN
        -- Only a full store purges, oldest first, a batch at a time. It locks each record's
        -- principal count with it, skipping those another transaction holds: the deletes'
        -- trigger then waits on none of them while this claim holds the store's count,
        -- which would be the wrong order.
        DELETE FROM idempotency_records r WHERE r.key IN (
            SELECT e.key FROM idempotency_records e JOIN idempotency_shares s ON s.principal = e.principal
            WHERE e.status = 'completed' AND e.deadline <= clock_timestamp()
            ORDER BY e.deadline LIMIT 1000 FOR UPDATE OF e, s SKIP LOCKED);
        SELECT c.n INTO live FROM idempotency_record_count c;
        IF live > max_records THEN  -- nothing left to purge: this key is refused, the purge kept
            DELETE FROM idempotency_records r WHERE r.key = claim_key;
            RETURN QUERY SELECT 'full', NULL::bytea, NULL::text;
            RETURN;
        END IF;
    END IF;
    RETURN QUERY SELECT 'won', claim_fingerprint, NULL::text;
END
$$;
