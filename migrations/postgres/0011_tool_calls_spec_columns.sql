-- report_tool_calls_v1 gains the two columns the reporting contract names
-- that it lacked: `at` (when the call began, the same value as `called_at`)
-- and `grant_rule_id` (the tool grant that allowed the call, the same value
-- as `matched_grant`). They are added after the existing columns, so a
-- reader that selects by position keeps its columns; CREATE OR REPLACE
-- keeps the view's grant to writ_reporting.

CREATE OR REPLACE VIEW report_tool_calls_v1 AS
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
    CAST(c.native_status AS BIGINT) AS native_status,
    c.error_code    AS error_code,
    c.completed_at  AS completed_at,
    c.called_at     AS at,
    c.matched_grant AS grant_rule_id
FROM tool_calls c;
