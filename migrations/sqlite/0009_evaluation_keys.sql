-- Grants and users are never deleted: these triggers refuse it, as on
-- PostgreSQL (where the evaluation's foreign keys to them are dropped,
-- docs/decisions.md, session 6). SQLite keeps its foreign keys: its checks
-- take no row locks.

CREATE TRIGGER grants_never_deleted BEFORE DELETE ON grants
BEGIN
    SELECT RAISE(ABORT, 'grants rows are never deleted');
END;

CREATE TRIGGER users_never_deleted BEFORE DELETE ON users
BEGIN
    SELECT RAISE(ABORT, 'users rows are never deleted');
END;
