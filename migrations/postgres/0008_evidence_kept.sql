-- The evidence an admission evaluation cites (the catalog, the health
-- snapshot, the filesystem-context change) is history: it is never deleted
-- or changed, and these triggers refuse it. An evaluation's references to it
-- therefore cannot dangle, and Writ writes them from rows it read in the
-- same transaction; the foreign keys that also checked them are dropped.
-- On PostgreSQL each such check takes a KEY SHARE lock on a row that every
-- concurrent submission shares (one catalog, one snapshot), which cost a
-- quarter of the handoff statement under load (docs/decisions.md).

CREATE FUNCTION admission_evidence_kept() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% rows are admission evidence: never deleted or changed', TG_TABLE_NAME;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER catalogs_kept BEFORE UPDATE OR DELETE ON catalogs
    FOR EACH ROW EXECUTE FUNCTION admission_evidence_kept();
CREATE TRIGGER health_snapshots_kept BEFORE UPDATE OR DELETE ON health_snapshots
    FOR EACH ROW EXECUTE FUNCTION admission_evidence_kept();
CREATE TRIGGER fs_context_changes_kept BEFORE UPDATE OR DELETE ON fs_context_changes
    FOR EACH ROW EXECUTE FUNCTION admission_evidence_kept();

ALTER TABLE admission_evaluations
    DROP CONSTRAINT admission_evaluations_snapshot_id_fkey,
    DROP CONSTRAINT admission_evaluations_catalog_version_fkey,
    DROP CONSTRAINT admission_evaluations_filesystem_grant_id_fkey;
