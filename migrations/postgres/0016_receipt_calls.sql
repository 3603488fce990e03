-- Each receipt keeps the id of the audit record of the call that created
-- it (`call_id`), so a receipt's evidence is one inclusion proof away
-- (docs/audit.md). No foreign key: records leave the database through
-- archives, receipts never do.
--
-- Receipts written before this migration are linked where the records
-- allow it: an agent's receipts and its records of submissions that
-- created one (`submit_agent_work_proposal` answered 201) are written in
-- the same transactions, so in id order they pair one to one. Where an
-- agent's counts differ (receipts made without a record, such as the demo's
-- seeded ones), its receipts are left unlinked (`call_id` NULL):
-- `SELECT id FROM submissions WHERE call_id IS NULL` lists them.

ALTER TABLE submissions ADD COLUMN call_id BIGINT;

UPDATE submissions SET call_id = pairs.call_id
FROM (
    SELECT r.id AS submission_id, c.id AS call_id
    FROM (SELECT s.id, s.agent_id,
                 ROW_NUMBER() OVER (PARTITION BY s.agent_id ORDER BY s.id) AS n,
                 COUNT(*) OVER (PARTITION BY s.agent_id) AS k
          FROM submissions s) r
    JOIN (SELECT t.id, t.agent_id,
                 ROW_NUMBER() OVER (PARTITION BY t.agent_id ORDER BY t.id) AS n,
                 COUNT(*) OVER (PARTITION BY t.agent_id) AS k
          FROM tool_calls t
          WHERE t.tool = 'submit_agent_work_proposal' AND t.native_status = 201) c
      ON c.agent_id = r.agent_id AND c.n = r.n AND c.k = r.k
) pairs
WHERE submissions.id = pairs.submission_id;
