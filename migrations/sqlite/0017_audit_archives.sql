-- Archives of sealed audit records (docs/audit.md, spec audit-proof.md).
--
-- `writ audit archive` writes the records of seals `first_seal..=through_seal`
-- to a file, verifies it, and then in one transaction inserts a row here and
-- deletes those records. Rows are append-only. The delete trigger of
-- `tool_calls` lets a record go only while an archive row whose seals cover
-- it is open (`deleting = 1`): SQLite has no transaction id to compare, so
-- the archive's transaction inserts its row open and closes it (NULL)
-- before it commits. An open row references `audit_archives_closed`, which
-- never holds a row, through a deferred foreign key: a transaction that
-- would commit an open row fails at its commit. So only the transaction
-- that wrote an archive row deletes by it, and a transaction that fails
-- leaves neither the row nor the deletes.
--
-- A seal's record ids and leaf hashes leave with its records (the archive
-- holds them); every field its hash covers stays, so the chain stays
-- verifiable.
--
-- Ids are never reused: a record's id is its table's largest id plus one,
-- so the record holding the largest id is never deleted (an archive through
-- the seal that holds the newest record waits for a newer one).

CREATE TABLE audit_archives_closed (id INTEGER PRIMARY KEY);

CREATE TRIGGER audit_archives_closed_stays_empty BEFORE INSERT ON audit_archives_closed
BEGIN
    SELECT RAISE(ABORT, 'audit_archives_closed never holds a row');
END;

CREATE TABLE audit_archives (
    seq          INTEGER PRIMARY KEY,
    first_seal   INTEGER NOT NULL UNIQUE,
    through_seal INTEGER NOT NULL UNIQUE REFERENCES audit_seals (seq),
    record_count INTEGER NOT NULL CHECK (record_count > 0),
    file_name    TEXT    NOT NULL,
    file_sha256  TEXT    NOT NULL,
    file_bytes   INTEGER NOT NULL,
    archived_by  TEXT    NOT NULL,
    archived_at  TEXT    NOT NULL,
    deleting     INTEGER DEFAULT 1 CHECK (deleting = 1)
                 REFERENCES audit_archives_closed (id) DEFERRABLE INITIALLY DEFERRED,
    CHECK (through_seal >= first_seal)
);

-- Archives follow each other without gaps, and one is open at a time.
CREATE TRIGGER audit_archives_in_order BEFORE INSERT ON audit_archives
WHEN NEW.deleting IS NOT 1
  OR EXISTS (SELECT 1 FROM audit_archives WHERE deleting IS NOT NULL)
  OR NEW.first_seal IS NOT coalesce((SELECT max(through_seal) FROM audit_archives), 0) + 1
BEGIN
    SELECT RAISE(ABORT, 'audit_archives rows follow the previous archive, one open at a time');
END;

-- The only change: the archive's own transaction closes its row.
CREATE TRIGGER audit_archives_no_update BEFORE UPDATE ON audit_archives
WHEN OLD.deleting IS NOT 1 OR NEW.deleting IS NOT NULL
  OR NEW.seq IS NOT OLD.seq
  OR NEW.first_seal IS NOT OLD.first_seal
  OR NEW.through_seal IS NOT OLD.through_seal
  OR NEW.record_count IS NOT OLD.record_count
  OR NEW.file_name IS NOT OLD.file_name
  OR NEW.file_sha256 IS NOT OLD.file_sha256
  OR NEW.file_bytes IS NOT OLD.file_bytes
  OR NEW.archived_by IS NOT OLD.archived_by
  OR NEW.archived_at IS NOT OLD.archived_at
BEGIN
    SELECT RAISE(ABORT, 'audit_archives rows are never changed');
END;

-- An archive closes only once the records it holds are gone.
CREATE TRIGGER audit_archives_complete BEFORE UPDATE ON audit_archives
WHEN EXISTS (
    SELECT 1 FROM tool_calls
    WHERE id <= (SELECT last_call_id FROM audit_seals WHERE seq = NEW.through_seal)
)
BEGIN
    SELECT RAISE(ABORT, 'an archive commits only without the records it holds');
END;

CREATE TRIGGER audit_archives_no_delete BEFORE DELETE ON audit_archives
BEGIN
    SELECT RAISE(ABORT, 'audit_archives rows are never deleted');
END;

-- A seal stays, with every field its hash covers; its record ids and leaf
-- hashes go with its records (they are in the archive): the archive's own
-- transaction empties the two lists, and nothing else may change.
DROP TRIGGER audit_seals_no_update;
CREATE TRIGGER audit_seals_no_update BEFORE UPDATE ON audit_seals
WHEN NOT (
    NEW.call_ids = '[]' AND NEW.leaf_hashes = '[]'
    AND NEW.seq IS OLD.seq
    AND NEW.first_position IS OLD.first_position
    AND NEW.last_position IS OLD.last_position
    AND NEW.record_count IS OLD.record_count
    AND NEW.merkle_root IS OLD.merkle_root
    AND NEW.prev_seal_hash IS OLD.prev_seal_hash
    AND NEW.sealed_at IS OLD.sealed_at
    AND NEW.key_id IS OLD.key_id
    AND NEW.seal_hash IS OLD.seal_hash
    AND NEW.signature IS OLD.signature
    AND NEW.last_call_id IS OLD.last_call_id
    AND EXISTS (
        SELECT 1 FROM audit_archives a
        WHERE a.deleting = 1 AND OLD.seq BETWEEN a.first_seal AND a.through_seal
    )
)
BEGIN
    SELECT RAISE(ABORT, 'audit_seals rows are never changed');
END;

DROP TRIGGER tool_calls_no_delete;
CREATE TRIGGER tool_calls_no_delete BEFORE DELETE ON tool_calls
WHEN NOT EXISTS (
    SELECT 1
    FROM audit_archives a
    JOIN audit_seals s ON s.seq = a.through_seal
    WHERE a.deleting = 1 AND OLD.id <= s.last_call_id
)
BEGIN
    SELECT RAISE(ABORT, 'tool_calls rows are deleted only by the archive of their seal');
END;

CREATE TRIGGER tool_calls_newest_stays BEFORE DELETE ON tool_calls
WHEN OLD.id = (SELECT max(id) FROM tool_calls)
BEGIN
    SELECT RAISE(ABORT, 'the newest tool_calls record stays, so ids are never reused');
END;
