-- Per-agent MCP tool grants (policy v2): each bot's current grant set, and an
-- append-only history of every change (who, when, the new set). Grants are
-- JSON text: [{"id": ..., "repos": [...], "tools": [...]}].

CREATE TABLE agent_tool_grants (
    user_id    INTEGER PRIMARY KEY REFERENCES users (id),
    grants     TEXT    NOT NULL,
    updated_at TEXT    NOT NULL,
    updated_by TEXT    NOT NULL
);

CREATE TABLE agent_tool_grant_changes (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id    INTEGER NOT NULL REFERENCES users (id),
    grants     TEXT    NOT NULL,
    changed_by TEXT    NOT NULL,
    changed_at TEXT    NOT NULL
);
CREATE INDEX agent_tool_grant_changes_user ON agent_tool_grant_changes (user_id, id);
