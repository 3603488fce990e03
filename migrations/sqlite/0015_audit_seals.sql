-- Seals over the audit records (docs/audit.md, spec audit-proof.md).
--
-- Records are sealed in id order (on SQLite the single writer makes id
-- order commit order), a prefix at a time: a record is sealed exactly when
-- its id is at most the latest seal's `last_call_id`. So sealing writes one
-- row here and none in `tool_calls`. Each seal keeps its records' call ids
-- and leaf hashes in order (JSON arrays), so a verifier names the first
-- record that no longer matches, and the seal outlives an archived record.
--
-- `first_position`, `last_position` and `record_count` are the spec's
-- `first`, `last` and `count`. Seals are append-only like the records.

CREATE TABLE audit_seals (
    seq            INTEGER PRIMARY KEY,
    first_position INTEGER NOT NULL,
    last_position  INTEGER NOT NULL,
    record_count   INTEGER NOT NULL CHECK (record_count > 0),
    merkle_root    TEXT    NOT NULL,
    prev_seal_hash TEXT,
    sealed_at      TEXT    NOT NULL,
    key_id         TEXT,
    seal_hash      TEXT    NOT NULL,
    signature      TEXT,
    last_call_id   INTEGER NOT NULL,
    call_ids       TEXT    NOT NULL,
    leaf_hashes    TEXT    NOT NULL,
    CHECK (last_position = first_position + record_count - 1)
);
CREATE UNIQUE INDEX audit_seals_last_call ON audit_seals (last_call_id);

CREATE TRIGGER audit_seals_no_update BEFORE UPDATE ON audit_seals
BEGIN
    SELECT RAISE(ABORT, 'audit_seals rows are never changed');
END;

CREATE TRIGGER audit_seals_no_delete BEFORE DELETE ON audit_seals
BEGIN
    SELECT RAISE(ABORT, 'audit_seals rows are never deleted');
END;

-- A sealed record never changes again: an outcome arriving after its
-- record was sealed (a call older than the grace) is refused, and that
-- call fails closed.
CREATE TRIGGER tool_calls_sealed BEFORE UPDATE ON tool_calls
WHEN OLD.id <= (SELECT last_call_id FROM audit_seals ORDER BY seq DESC LIMIT 1)
BEGIN
    SELECT RAISE(ABORT, 'tool_calls record is sealed');
END;

-- Ed25519 public keys that have signed seals, by id (GET /api/v1/audit/keys).
CREATE TABLE audit_keys (
    key_id     TEXT PRIMARY KEY,
    algorithm  TEXT NOT NULL CHECK (algorithm = 'ed25519'),
    public_key TEXT NOT NULL,
    first_used TEXT NOT NULL
);

CREATE TRIGGER audit_keys_no_update BEFORE UPDATE ON audit_keys
BEGIN
    SELECT RAISE(ABORT, 'audit_keys rows are never changed');
END;

CREATE TRIGGER audit_keys_no_delete BEFORE DELETE ON audit_keys
BEGIN
    SELECT RAISE(ABORT, 'audit_keys rows are never deleted');
END;
