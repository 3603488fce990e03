-- Issues and submission receipts. A receipt keeps the issue's id, index, URL
-- and repository as committed: it has no foreign key to the issue, which may
-- later be deleted or transferred.

CREATE TABLE issues (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    repository_id INTEGER NOT NULL REFERENCES repositories (id),
    issue_index   INTEGER NOT NULL,
    title         TEXT    NOT NULL,
    body          TEXT    NOT NULL,
    poster_id     INTEGER NOT NULL REFERENCES users (id),
    created_at    TEXT    NOT NULL,
    UNIQUE (repository_id, issue_index)
);

CREATE TABLE submissions (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    grant_id             INTEGER NOT NULL REFERENCES grants (id),
    request_key          TEXT    NOT NULL,
    content_digest       TEXT    NOT NULL,
    proposal_digest      TEXT    NOT NULL,
    agent_id             INTEGER NOT NULL REFERENCES users (id),
    issue_id             INTEGER NOT NULL,
    issue_index          INTEGER NOT NULL,
    repository_id        INTEGER NOT NULL REFERENCES repositories (id),
    repository_full_name TEXT    NOT NULL,
    issue_url            TEXT    NOT NULL,
    evaluation_id        INTEGER,
    created_at           TEXT    NOT NULL,
    CONSTRAINT submissions_grant_key UNIQUE (grant_id, request_key)
);
CREATE UNIQUE INDEX submissions_issue ON submissions (issue_id);
