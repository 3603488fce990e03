-- Exact list totals without scanning, and page ids from narrow indexes.
--
-- grant_counts holds how many grants each (agent, repository, state) has.
-- Triggers keep it in the same transaction as every insert, move (state,
-- agent or repository change) and delete of a grant, whatever the code path
-- and however many Writ processes share the database: each change is an
-- atomic upsert or update of the counter row. A list's total is then a sum
-- over a few counter rows, read in the list's snapshot.

CREATE TABLE grant_counts (
    agent_id      BIGINT NOT NULL,
    repository_id BIGINT NOT NULL,
    state         TEXT   NOT NULL,
    n             BIGINT NOT NULL CHECK (n >= 0),
    PRIMARY KEY (agent_id, repository_id, state)
);
CREATE INDEX grant_counts_repository ON grant_counts (repository_id, state);

-- No grant changes between the backfill and the triggers.
LOCK TABLE grants IN SHARE ROW EXCLUSIVE MODE;

INSERT INTO grant_counts (agent_id, repository_id, state, n)
SELECT agent_id, repository_id, state, COUNT(*)
FROM grants
GROUP BY agent_id, repository_id, state;

-- Inserts and deletes count per statement: one upsert per counter row (row
-- by row, a bulk insert would update one counter row thousands of times in
-- one transaction, each update walking the row's growing version chain).
-- Rows are taken in key order, so concurrent transactions lock them in the
-- same order.
CREATE FUNCTION grant_counts_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO grant_counts (agent_id, repository_id, state, n)
    SELECT agent_id, repository_id, state, COUNT(*)
    FROM inserted
    GROUP BY agent_id, repository_id, state
    ORDER BY agent_id, repository_id, state
    ON CONFLICT (agent_id, repository_id, state) DO UPDATE SET n = grant_counts.n + EXCLUDED.n;
    RETURN NULL;
END
$$;

CREATE FUNCTION grant_counts_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE grant_counts c SET n = c.n - d.n
    FROM (
        SELECT agent_id, repository_id, state, COUNT(*) AS n
        FROM deleted
        GROUP BY agent_id, repository_id, state
    ) d
    WHERE c.agent_id = d.agent_id AND c.repository_id = d.repository_id AND c.state = d.state;
    RETURN NULL;
END
$$;

-- A grant that moves (state, agent or repository; the trigger's WHEN skips
-- every other update): its two counter rows, the smaller key first, so two
-- concurrent moves cannot deadlock on them.
CREATE FUNCTION grant_counts_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.agent_id, OLD.repository_id, OLD.state) < (NEW.agent_id, NEW.repository_id, NEW.state) THEN
        UPDATE grant_counts SET n = n - 1
        WHERE agent_id = OLD.agent_id AND repository_id = OLD.repository_id AND state = OLD.state;
    END IF;
    INSERT INTO grant_counts (agent_id, repository_id, state, n)
    VALUES (NEW.agent_id, NEW.repository_id, NEW.state, 1)
    ON CONFLICT (agent_id, repository_id, state) DO UPDATE SET n = grant_counts.n + 1;
    IF (OLD.agent_id, OLD.repository_id, OLD.state) > (NEW.agent_id, NEW.repository_id, NEW.state) THEN
        UPDATE grant_counts SET n = n - 1
        WHERE agent_id = OLD.agent_id AND repository_id = OLD.repository_id AND state = OLD.state;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER grant_counts_insert AFTER INSERT ON grants
REFERENCING NEW TABLE AS inserted
FOR EACH STATEMENT EXECUTE FUNCTION grant_counts_inserted();

CREATE TRIGGER grant_counts_delete AFTER DELETE ON grants
REFERENCING OLD TABLE AS deleted
FOR EACH STATEMENT EXECUTE FUNCTION grant_counts_deleted();

CREATE TRIGGER grant_counts_update AFTER UPDATE OF agent_id, repository_id, state ON grants
FOR EACH ROW
WHEN (OLD.agent_id <> NEW.agent_id
   OR OLD.repository_id <> NEW.repository_id
   OR OLD.state <> NEW.state)
EXECUTE FUNCTION grant_counts_moved();

-- Page ids in id order per (agent, state) and (repository, state), from the
-- index alone; repository_id rides along for the access filter.
CREATE INDEX grants_agent_state ON grants (agent_id, state, id) INCLUDE (repository_id);
CREATE INDEX grants_repository_state ON grants (repository_id, state, id);
