-- Grants and users are never deleted (these triggers refuse it), so an
-- admission evaluation's references to its grant and its actor cannot
-- dangle; Writ writes them from the grant row it holds locked and the
-- authenticated caller, in the same transaction. The foreign keys that also
-- checked them on every evaluation are dropped: two more lookups with row
-- locks per submission, a fifth of the handoff statement's work under load
-- (docs/decisions.md, session 6). Receipts, issues and audit records keep
-- theirs.

CREATE FUNCTION never_deleted() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% rows are never deleted', TG_TABLE_NAME;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER grants_never_deleted BEFORE DELETE ON grants
    FOR EACH ROW EXECUTE FUNCTION never_deleted();
CREATE TRIGGER users_never_deleted BEFORE DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION never_deleted();

ALTER TABLE admission_evaluations
    DROP CONSTRAINT admission_evaluations_grant_id_fkey,
    DROP CONSTRAINT admission_evaluations_actor_id_fkey;
