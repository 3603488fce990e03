-- MCP admission: catalogs in use, current MCP health, immutable health
-- snapshots, project filesystem context history, persisted evaluations.

CREATE TABLE catalogs (
    version         TEXT PRIMARY KEY,
    content         TEXT NOT NULL,
    first_loaded_at TEXT NOT NULL
);

CREATE TABLE mcp_health (
    mcp_id     TEXT    PRIMARY KEY,
    installed  BOOLEAN NOT NULL,
    healthy    BOOLEAN NOT NULL,
    detail     TEXT    NOT NULL,
    checked_at TEXT    NOT NULL,
    updated_by TEXT    NOT NULL
);

CREATE TABLE health_snapshots (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    digest     TEXT    NOT NULL UNIQUE,
    content    TEXT    NOT NULL,
    created_at TEXT    NOT NULL
);

CREATE TABLE fs_context_changes (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    repository_id INTEGER NOT NULL REFERENCES repositories (id),
    action        TEXT    NOT NULL CHECK (action IN ('approved', 'denied', 'removed')),
    capabilities  TEXT    NOT NULL,
    actor_id      INTEGER NOT NULL REFERENCES users (id),
    at            TEXT    NOT NULL
);
CREATE INDEX fs_context_changes_repository ON fs_context_changes (repository_id, id);

CREATE TABLE admission_evaluations (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    grant_id            INTEGER NOT NULL REFERENCES grants (id),
    phase               TEXT    NOT NULL CHECK (phase IN ('approval', 'handoff')),
    status              TEXT    NOT NULL CHECK (status IN ('allowed', 'warning', 'blocked')),
    retryable           BOOLEAN NOT NULL,
    blocked_count       INTEGER NOT NULL,
    warning_count       INTEGER NOT NULL,
    snapshot_id         INTEGER NOT NULL REFERENCES health_snapshots (id),
    catalog_version     TEXT    NOT NULL REFERENCES catalogs (version),
    filesystem_grant_id INTEGER REFERENCES fs_context_changes (id),
    proposal_digest     TEXT    NOT NULL,
    decisions           TEXT    NOT NULL,
    actor_id            INTEGER NOT NULL REFERENCES users (id),
    evaluated_at        TEXT    NOT NULL
);
CREATE INDEX admission_evaluations_grant ON admission_evaluations (grant_id, id);

DROP VIEW report_receipts_v1;
CREATE VIEW report_receipts_v1 AS
SELECT
    s.grant_id                                  AS grant_id,
    s.request_key                               AS request_key,
    s.repository_full_name                      AS repository,
    agent.login                                 AS agent_login,
    issuer.login                                AS issuer_login,
    approver.login                              AS approver_login,
    s.issue_id                                  AS issue_id,
    s.issue_index                               AS issue_index,
    s.issue_url                                 AS issue_url,
    CASE
        WHEN i.id IS NULL THEN 'issue_deleted'
        WHEN i.repository_id = s.repository_id AND i.issue_index = s.issue_index THEN 'submitted'
        ELSE 'issue_binding_changed'
    END                                         AS outcome,
    'awaiting_review'                           AS review_state,
    s.evaluation_id                             AS handoff_evaluation_id,
    e.status                                    AS handoff_status,
    e.snapshot_id                               AS snapshot_id,
    s.created_at                                AS submitted_at
FROM submissions s
JOIN grants g ON g.id = s.grant_id
JOIN users agent ON agent.id = s.agent_id
JOIN users issuer ON issuer.id = g.issuer_id
LEFT JOIN users approver ON approver.id = g.approver_id
LEFT JOIN issues i ON i.id = s.issue_id
LEFT JOIN admission_evaluations e ON e.id = s.evaluation_id;

DROP VIEW report_grants_v1;
CREATE VIEW report_grants_v1 AS
SELECT
    g.id                                        AS grant_id,
    owner.login || '/' || r.name                AS repository,
    agent.login                                 AS agent_login,
    issuer.login                                AS issuer_login,
    approver.login                              AS approver_login,
    g.state                                     AS state,
    g.state_revision                            AS state_revision,
    g.submission_count                          AS submission_count,
    g.max_submissions                           AS max_submissions,
    g.created_at                                AS created_at,
    g.confirmed_at                              AS confirmed_at,
    g.approved_at                               AS approved_at,
    g.revoked_at                                AS revoked_at,
    (SELECT e.status FROM admission_evaluations e
      WHERE e.grant_id = g.id ORDER BY e.id DESC LIMIT 1) AS last_admission_status
FROM grants g
JOIN repositories r ON r.id = g.repository_id
JOIN users owner ON owner.id = r.owner_id
JOIN users agent ON agent.id = g.agent_id
JOIN users issuer ON issuer.id = g.issuer_id
LEFT JOIN users approver ON approver.id = g.approver_id;

CREATE VIEW report_admissions_v1 AS
SELECT
    e.id                                        AS evaluation_id,
    e.grant_id                                  AS grant_id,
    e.phase                                     AS phase,
    e.status                                    AS status,
    CASE WHEN e.retryable THEN 1 ELSE 0 END     AS retryable,
    e.blocked_count                             AS blocked_count,
    e.warning_count                             AS warning_count,
    e.snapshot_id                               AS snapshot_id,
    e.catalog_version                           AS catalog_version,
    e.evaluated_at                              AS evaluated_at,
    owner.login || '/' || r.name                AS repository,
    agent.login                                 AS agent_login
FROM admission_evaluations e
JOIN grants g ON g.id = e.grant_id
JOIN repositories r ON r.id = g.repository_id
JOIN users owner ON owner.id = r.owner_id
JOIN users agent ON agent.id = g.agent_id;
