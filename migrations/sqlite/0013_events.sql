-- The events of docs/events.md: one row per change, written in the change's
-- own transaction. The grant timeline (`grant_events`) held a subset of the
-- same facts; its rows move here and `grant_events` becomes a view over
-- `events`, so there is one source of truth.
--
-- `state`, `state_revision` and `proposal_digest` are the grant's after the
-- change (for a grant's event); `data` is the event's `data` object as JSON
-- text (never a secret, never text a bot wrote). `AUTOINCREMENT` keeps an
-- id from ever being used twice: a cursor names one event for good.

CREATE TABLE events (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    type            TEXT    NOT NULL,
    occurred_at     TEXT    NOT NULL,
    actor_id        INTEGER REFERENCES users (id),
    repository_id   INTEGER REFERENCES repositories (id),
    grant_id        INTEGER REFERENCES grants (id),
    from_state      TEXT,
    state           TEXT,
    state_revision  INTEGER,
    proposal_digest TEXT,
    data            TEXT    NOT NULL DEFAULT '{}'
);
CREATE INDEX events_grant ON events (grant_id, id) WHERE grant_id IS NOT NULL;

INSERT INTO events (id, type, occurred_at, actor_id, repository_id, grant_id,
                    from_state, state, state_revision, proposal_digest, data)
SELECT e.id, 'grant.' || e.event, e.at, e.actor_id, g.repository_id, e.grant_id,
       e.from_state, e.to_state, e.state_revision, e.proposal_digest,
       CASE WHEN e.event = 'withdrawn' AND e.detail IS NOT NULL
            THEN json_object('reason', e.detail) ELSE '{}' END
FROM grant_events e JOIN grants g ON g.id = e.grant_id
ORDER BY e.id;

DROP TABLE grant_events;

-- The grant timeline as it was: its five kinds of entry, read from `events`.
CREATE VIEW grant_events AS
SELECT id, grant_id, substr(type, 7) AS event, actor_id, from_state,
       state AS to_state, state_revision, proposal_digest,
       json_extract(data, '$.reason') AS detail, occurred_at AS at
FROM events
WHERE type IN ('grant.prepared', 'grant.edited', 'grant.confirmed',
               'grant.approved', 'grant.withdrawn');
