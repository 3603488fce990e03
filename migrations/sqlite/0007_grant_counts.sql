-- Exact list totals without scanning, and page ids from narrow indexes.
--
-- grant_counts holds how many grants each (agent, repository, state) has.
-- Triggers keep it in the same transaction as every insert, move (state,
-- agent or repository change) and delete of a grant, whatever the code path;
-- a list's total is then a sum over a few counter rows (the repositories the
-- reader may see, the states asked for), read in the list's snapshot.

CREATE TABLE grant_counts (
    agent_id      INTEGER NOT NULL,
    repository_id INTEGER NOT NULL,
    state         TEXT    NOT NULL,
    n             INTEGER NOT NULL CHECK (n >= 0),
    PRIMARY KEY (agent_id, repository_id, state)
) WITHOUT ROWID;
CREATE INDEX grant_counts_repository ON grant_counts (repository_id, state);

INSERT INTO grant_counts (agent_id, repository_id, state, n)
SELECT agent_id, repository_id, state, COUNT(*)
FROM grants
GROUP BY agent_id, repository_id, state;

CREATE TRIGGER grant_counts_insert AFTER INSERT ON grants
BEGIN
    INSERT INTO grant_counts (agent_id, repository_id, state, n)
    VALUES (NEW.agent_id, NEW.repository_id, NEW.state, 1)
    ON CONFLICT (agent_id, repository_id, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER grant_counts_update AFTER UPDATE OF agent_id, repository_id, state ON grants
WHEN OLD.agent_id <> NEW.agent_id
  OR OLD.repository_id <> NEW.repository_id
  OR OLD.state <> NEW.state
BEGIN
    UPDATE grant_counts SET n = n - 1
    WHERE agent_id = OLD.agent_id AND repository_id = OLD.repository_id AND state = OLD.state;
    INSERT INTO grant_counts (agent_id, repository_id, state, n)
    VALUES (NEW.agent_id, NEW.repository_id, NEW.state, 1)
    ON CONFLICT (agent_id, repository_id, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER grant_counts_delete AFTER DELETE ON grants
BEGIN
    UPDATE grant_counts SET n = n - 1
    WHERE agent_id = OLD.agent_id AND repository_id = OLD.repository_id AND state = OLD.state;
END;

-- Page ids in id order per (agent, state) and (repository, state), without
-- reading the wide rows; repository_id rides along for the access filter.
CREATE INDEX grants_agent_state ON grants (agent_id, state, id, repository_id);
CREATE INDEX grants_repository_state ON grants (repository_id, state, id);
