-- No statement of Writ and no reporting view reads through this index (the
-- view exposes `agent_login`, not `agent_id`), and each record paid for it
-- (docs/decisions.md, session 13; the same migration on SQLite also drops
-- AUTOINCREMENT, which PostgreSQL's identity column does not have).

DROP INDEX tool_calls_agent;
