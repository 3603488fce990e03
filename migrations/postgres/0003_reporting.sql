-- Reporting views: the stable, documented contract for auditors (docs/reporting.md).
-- Same names, same columns in the same order on SQLite and PostgreSQL.
-- Admission columns stay NULL until the admission evaluation is recorded.

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
    CAST(NULL AS TEXT)                          AS handoff_status,
    CAST(NULL AS BIGINT)                        AS snapshot_id,
    s.created_at                                AS submitted_at
FROM submissions s
JOIN grants g ON g.id = s.grant_id
JOIN users agent ON agent.id = s.agent_id
JOIN users issuer ON issuer.id = g.issuer_id
LEFT JOIN users approver ON approver.id = g.approver_id
LEFT JOIN issues i ON i.id = s.issue_id;

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
    CAST(NULL AS TEXT)                          AS last_admission_status
FROM grants g
JOIN repositories r ON r.id = g.repository_id
JOIN users owner ON owner.id = r.owner_id
JOIN users agent ON agent.id = g.agent_id
JOIN users issuer ON issuer.id = g.issuer_id
LEFT JOIN users approver ON approver.id = g.approver_id;

-- A read-only role for analysts: SELECT on the views only. Roles are global to
-- the cluster, so several databases may race to create it.
DO $$
BEGIN
    CREATE ROLE writ_reporting NOLOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;
GRANT SELECT ON report_receipts_v1, report_grants_v1 TO writ_reporting;
