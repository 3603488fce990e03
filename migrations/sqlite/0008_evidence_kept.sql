-- The evidence an admission evaluation cites (the catalog, the health
-- snapshot, the filesystem-context change) is history: it is never deleted
-- or changed, and these triggers refuse it. (PostgreSQL also drops the
-- evaluation's foreign keys to it, whose checks lock rows every concurrent
-- submission shares; SQLite's checks take no row locks and stay.)

CREATE TRIGGER catalogs_kept_update BEFORE UPDATE ON catalogs
BEGIN
    SELECT RAISE(ABORT, 'catalogs rows are admission evidence: never deleted or changed');
END;
CREATE TRIGGER catalogs_kept_delete BEFORE DELETE ON catalogs
BEGIN
    SELECT RAISE(ABORT, 'catalogs rows are admission evidence: never deleted or changed');
END;
CREATE TRIGGER health_snapshots_kept_update BEFORE UPDATE ON health_snapshots
BEGIN
    SELECT RAISE(ABORT, 'health_snapshots rows are admission evidence: never deleted or changed');
END;
CREATE TRIGGER health_snapshots_kept_delete BEFORE DELETE ON health_snapshots
BEGIN
    SELECT RAISE(ABORT, 'health_snapshots rows are admission evidence: never deleted or changed');
END;
CREATE TRIGGER fs_context_changes_kept_update BEFORE UPDATE ON fs_context_changes
BEGIN
    SELECT RAISE(ABORT, 'fs_context_changes rows are admission evidence: never deleted or changed');
END;
CREATE TRIGGER fs_context_changes_kept_delete BEFORE DELETE ON fs_context_changes
BEGIN
    SELECT RAISE(ABORT, 'fs_context_changes rows are admission evidence: never deleted or changed');
END;
