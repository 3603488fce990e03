-- Archives of sealed audit records (docs/audit.md, spec audit-proof.md).
--
-- `writ audit archive` writes the records of seals `first_seal..=through_seal`
-- to a file, verifies it, and then in one transaction inserts a row here and
-- deletes those records, and empties those seals' lists of record ids and
-- leaf hashes (the archive holds them). Rows are append-only. The delete trigger of
-- `tool_calls` lets a record go only when an archive row written by the
-- same transaction (`xact_id`) covers its seal; it runs once per statement
-- over the deleted rows. A transaction that fails leaves neither the row
-- nor the deletes. Record ids come from an identity sequence, so they are
-- never reused.

CREATE TABLE audit_archives (
    seq          BIGINT  PRIMARY KEY,
    first_seal   BIGINT  NOT NULL UNIQUE,
    through_seal BIGINT  NOT NULL UNIQUE REFERENCES audit_seals (seq),
    record_count BIGINT  NOT NULL CHECK (record_count > 0),
    file_name    TEXT    NOT NULL,
    file_sha256  TEXT    NOT NULL,
    file_bytes   BIGINT  NOT NULL,
    archived_by  TEXT    NOT NULL,
    archived_at  TEXT    NOT NULL,
    xact_id      xid8    NOT NULL DEFAULT pg_current_xact_id(),
    CHECK (through_seal >= first_seal)
);

-- Archives follow each other without gaps (two racing archives: the unique
-- first_seal lets one commit).
CREATE FUNCTION audit_archives_in_order() RETURNS trigger AS $$
BEGIN
    IF NEW.xact_id IS DISTINCT FROM pg_current_xact_id()
       OR NEW.first_seal IS DISTINCT FROM
          coalesce((SELECT max(through_seal) FROM audit_archives), 0) + 1 THEN
        RAISE EXCEPTION 'audit_archives rows follow the previous archive, written by their own transaction';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER audit_archives_in_order BEFORE INSERT ON audit_archives
    FOR EACH ROW EXECUTE FUNCTION audit_archives_in_order();
CREATE TRIGGER audit_archives_no_change BEFORE UPDATE OR DELETE ON audit_archives
    FOR EACH ROW EXECUTE FUNCTION audit_append_only();

-- An archive commits only once the records it holds are gone (checked at
-- its commit).
CREATE FUNCTION audit_archives_complete() RETURNS trigger AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM tool_calls t
        JOIN audit_seals s ON s.seq = NEW.through_seal
        WHERE (t.xact_id, t.id) <= (s.last_xact, s.last_call_id)
    ) THEN
        RAISE EXCEPTION 'an archive commits only without the records it holds';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE CONSTRAINT TRIGGER audit_archives_complete AFTER INSERT ON audit_archives
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION audit_archives_complete();

-- A seal stays, with every field its hash covers; its record ids and leaf
-- hashes go with its records (they are in the archive): the archive's own
-- transaction empties the two lists, and nothing else may change.
CREATE FUNCTION audit_seals_archived_lists() RETURNS trigger AS $$
BEGIN
    IF NEW.call_ids = '[]' AND NEW.leaf_hashes = '[]'
       AND (NEW.seq, NEW.first_position, NEW.last_position, NEW.record_count,
            NEW.merkle_root, NEW.prev_seal_hash, NEW.sealed_at, NEW.key_id,
            NEW.seal_hash, NEW.signature, NEW.last_xact, NEW.last_call_id)
           IS NOT DISTINCT FROM
           (OLD.seq, OLD.first_position, OLD.last_position, OLD.record_count,
            OLD.merkle_root, OLD.prev_seal_hash, OLD.sealed_at, OLD.key_id,
            OLD.seal_hash, OLD.signature, OLD.last_xact, OLD.last_call_id)
       AND EXISTS (
           SELECT 1 FROM audit_archives a
           WHERE a.xact_id = pg_current_xact_id()
             AND OLD.seq BETWEEN a.first_seal AND a.through_seal
       ) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'audit_seals rows are never changed or deleted';
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER audit_seals_no_change ON audit_seals;
CREATE TRIGGER audit_seals_no_change BEFORE UPDATE ON audit_seals
    FOR EACH ROW EXECUTE FUNCTION audit_seals_archived_lists();
CREATE TRIGGER audit_seals_no_delete BEFORE DELETE ON audit_seals
    FOR EACH ROW EXECUTE FUNCTION audit_append_only();

CREATE FUNCTION tool_calls_archived_only() RETURNS trigger AS $$
DECLARE
    through_xact xid8;
    through_id   BIGINT;
BEGIN
    SELECT s.last_xact, s.last_call_id INTO through_xact, through_id
    FROM audit_archives a
    JOIN audit_seals s ON s.seq = a.through_seal
    WHERE a.xact_id = pg_current_xact_id()
    ORDER BY a.seq DESC
    LIMIT 1;
    IF EXISTS (
        SELECT 1 FROM gone g
        WHERE through_id IS NULL OR (g.xact_id, g.id) > (through_xact, through_id)
    ) THEN
        RAISE EXCEPTION 'tool_calls rows are deleted only by the archive of their seal';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER tool_calls_no_delete ON tool_calls;
CREATE TRIGGER tool_calls_no_delete AFTER DELETE ON tool_calls
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION tool_calls_archived_only();
CREATE TRIGGER tool_calls_no_truncate BEFORE TRUNCATE ON tool_calls
    FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();
