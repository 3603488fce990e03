-- Fewer pages written per audit record (docs/decisions.md, session 13).
--
-- Each record's commit wrote one index page per distinct agent in the
-- commit (`tool_calls_agent` on (agent_id, id) keeps each agent's entries
-- apart) and the `sqlite_sequence` page (AUTOINCREMENT). No statement of
-- Writ and no reporting view reads through that index (the view exposes
-- `agent_login`, not `agent_id`), so it is dropped. AUTOINCREMENT is dropped
-- too: rows are never deleted (the trigger below), so the largest id is
-- never freed and SQLite's next rowid (largest + 1) is just as ascending.
--
-- SQLite cannot drop AUTOINCREMENT in place: the table is rebuilt, every
-- row kept with its id; its triggers, view and time index are made again
-- as in 0006. Dropping the table drops its `sqlite_sequence` row and runs no
-- trigger.

CREATE TABLE tool_calls_rebuilt (
    id            INTEGER PRIMARY KEY,
    called_at     TEXT    NOT NULL,
    via           TEXT    NOT NULL CHECK (via IN ('mcp', 'api')),
    agent_id      INTEGER NOT NULL,
    agent_login   TEXT    NOT NULL,
    token_id      INTEGER NOT NULL,
    tool          TEXT    NOT NULL,
    repository    TEXT,
    decision      TEXT    NOT NULL CHECK (decision IN ('allow', 'deny')),
    matched_grant TEXT,
    reason        TEXT    NOT NULL,
    rpc_id        TEXT,
    request_id    TEXT,
    arg_names     TEXT    NOT NULL,
    native_status INTEGER,
    error_code    TEXT,
    completed_at  TEXT
);

INSERT INTO tool_calls_rebuilt SELECT * FROM tool_calls;
DROP VIEW report_tool_calls_v1;
DROP TABLE tool_calls;
ALTER TABLE tool_calls_rebuilt RENAME TO tool_calls;
CREATE INDEX tool_calls_called_at ON tool_calls (called_at);

CREATE TRIGGER tool_calls_no_delete BEFORE DELETE ON tool_calls
BEGIN
    SELECT RAISE(ABORT, 'tool_calls rows are never deleted');
END;

CREATE TRIGGER tool_calls_no_update BEFORE UPDATE ON tool_calls
WHEN OLD.completed_at IS NOT NULL
  OR NEW.id IS NOT OLD.id
  OR NEW.called_at IS NOT OLD.called_at
  OR NEW.via IS NOT OLD.via
  OR NEW.agent_id IS NOT OLD.agent_id
  OR NEW.agent_login IS NOT OLD.agent_login
  OR NEW.token_id IS NOT OLD.token_id
  OR NEW.tool IS NOT OLD.tool
  OR NEW.repository IS NOT OLD.repository
  OR NEW.decision IS NOT OLD.decision
  OR NEW.matched_grant IS NOT OLD.matched_grant
  OR NEW.reason IS NOT OLD.reason
  OR NEW.rpc_id IS NOT OLD.rpc_id
  OR NEW.request_id IS NOT OLD.request_id
  OR NEW.arg_names IS NOT OLD.arg_names
BEGIN
    SELECT RAISE(ABORT, 'tool_calls rows only gain their outcome, once');
END;

CREATE VIEW report_tool_calls_v1 AS
SELECT
    c.id            AS call_id,
    c.called_at     AS called_at,
    c.via           AS via,
    c.agent_login   AS agent_login,
    c.token_id      AS token_id,
    c.tool          AS tool,
    c.repository    AS repository,
    c.decision      AS decision,
    c.matched_grant AS matched_grant,
    c.reason        AS reason,
    c.rpc_id        AS rpc_id,
    c.request_id    AS request_id,
    c.arg_names     AS arg_names,
    c.native_status AS native_status,
    c.error_code    AS error_code,
    c.completed_at  AS completed_at
FROM tool_calls c;
