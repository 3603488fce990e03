-- Seals over the audit records (docs/audit.md, spec audit-proof.md).
--
-- Records are sealed in commit-stable order, a prefix at a time: by
-- (xact_id, id), taking only records whose transaction id is below the
-- oldest transaction still running, the events feed's technique. A record
-- is sealed exactly when its (xact_id, id) is at most the latest seal's
-- (last_xact, last_call_id). So sealing writes one row here and none in
-- `tool_calls`. Each seal keeps its records' call ids and leaf hashes in
-- order (JSON arrays), so a verifier names the first record that no longer
-- matches, and the seal outlives an archived record.
--
-- `first_position`, `last_position` and `record_count` are the spec's
-- `first`, `last` and `count`. Seals are append-only like the records.
--
-- Existing records all take this migration's transaction id, so they sort
-- by id before every record written after it.

ALTER TABLE tool_calls ADD COLUMN xact_id xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX tool_calls_sealing ON tool_calls (xact_id, id);

CREATE TABLE audit_seals (
    seq            BIGINT  PRIMARY KEY,
    first_position BIGINT  NOT NULL,
    last_position  BIGINT  NOT NULL,
    record_count   BIGINT  NOT NULL CHECK (record_count > 0),
    merkle_root    TEXT    NOT NULL,
    prev_seal_hash TEXT,
    sealed_at      TEXT    NOT NULL,
    key_id         TEXT,
    seal_hash      TEXT    NOT NULL,
    signature      TEXT,
    last_xact      xid8    NOT NULL,
    last_call_id   BIGINT  NOT NULL,
    call_ids       TEXT    NOT NULL,
    leaf_hashes    TEXT    NOT NULL,
    CHECK (last_position = first_position + record_count - 1)
);
CREATE UNIQUE INDEX audit_seals_last_call ON audit_seals (last_xact, last_call_id);

CREATE FUNCTION audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% rows are never changed or deleted', TG_TABLE_NAME;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER audit_seals_no_change BEFORE UPDATE OR DELETE ON audit_seals
    FOR EACH ROW EXECUTE FUNCTION audit_append_only();

-- A sealed record never changes again: an outcome arriving after its
-- record was sealed (a call older than the grace) is refused, and that
-- call fails closed. The sealer touches the records it seals without an
-- outcome first, so a call completing one waits for the seal's commit and
-- then sees it (or, in a REPEATABLE READ transaction, fails to serialize).
CREATE FUNCTION tool_calls_sealed() RETURNS trigger AS $$
BEGIN
    IF NEW.xact_id IS DISTINCT FROM OLD.xact_id THEN
        RAISE EXCEPTION 'tool_calls rows only gain their outcome, once';
    END IF;
    IF EXISTS (
        SELECT 1
        FROM (SELECT last_xact, last_call_id FROM audit_seals ORDER BY seq DESC LIMIT 1) s
        WHERE (OLD.xact_id, OLD.id) <= (s.last_xact, s.last_call_id)
    ) THEN
        RAISE EXCEPTION 'tool_calls record is sealed';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER tool_calls_sealed BEFORE UPDATE ON tool_calls
    FOR EACH ROW EXECUTE FUNCTION tool_calls_sealed();

-- Ed25519 public keys that have signed seals, by id (GET /api/v1/audit/keys).
CREATE TABLE audit_keys (
    key_id     TEXT PRIMARY KEY,
    algorithm  TEXT NOT NULL CHECK (algorithm = 'ed25519'),
    public_key TEXT NOT NULL,
    first_used TEXT NOT NULL
);

CREATE TRIGGER audit_keys_no_change BEFORE UPDATE OR DELETE ON audit_keys
    FOR EACH ROW EXECUTE FUNCTION audit_append_only();
