-- Writ foundation: principals, repositories, grants, browser sessions.
-- Timestamps are fixed-width RFC 3339 UTC text (2026-11-30T09:16:27.123456Z).

CREATE TABLE users (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    login         TEXT    NOT NULL,
    lower_login   TEXT    NOT NULL UNIQUE,
    kind          TEXT    NOT NULL CHECK (kind IN ('human', 'bot')),
    is_admin      BOOLEAN NOT NULL DEFAULT FALSE,
    password_hash TEXT,
    created_at    TEXT    NOT NULL
);

CREATE TABLE access_tokens (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id      INTEGER NOT NULL REFERENCES users (id),
    name         TEXT    NOT NULL,
    token_hash   TEXT    NOT NULL UNIQUE,
    scopes       TEXT    NOT NULL,
    public_only  BOOLEAN NOT NULL DEFAULT FALSE,
    repositories TEXT,
    created_at   TEXT    NOT NULL,
    revoked_at   TEXT
);

CREATE TABLE repositories (
    id                        INTEGER PRIMARY KEY AUTOINCREMENT,
    owner_id                  INTEGER NOT NULL REFERENCES users (id),
    name                      TEXT    NOT NULL,
    lower_name                TEXT    NOT NULL,
    private                   BOOLEAN NOT NULL,
    require_distinct_approver BOOLEAN NOT NULL DEFAULT FALSE,
    next_issue_index          INTEGER NOT NULL DEFAULT 1,
    created_at                TEXT    NOT NULL,
    UNIQUE (owner_id, lower_name)
);

CREATE TABLE collaborators (
    repository_id INTEGER NOT NULL REFERENCES repositories (id),
    user_id       INTEGER NOT NULL REFERENCES users (id),
    permission    TEXT    NOT NULL CHECK (permission IN ('read', 'write', 'admin')),
    PRIMARY KEY (repository_id, user_id)
);
CREATE INDEX collaborators_user ON collaborators (user_id);

CREATE TABLE grants (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    repository_id    INTEGER NOT NULL REFERENCES repositories (id),
    agent_id         INTEGER NOT NULL REFERENCES users (id),
    issuer_id        INTEGER NOT NULL REFERENCES users (id),
    approver_id      INTEGER REFERENCES users (id),
    state            TEXT    NOT NULL
        CHECK (state IN ('awaiting_agent', 'awaiting_human', 'active', 'revoked')),
    state_revision   INTEGER NOT NULL,
    proposal         TEXT    NOT NULL,
    proposal_digest  TEXT    NOT NULL,
    max_submissions  INTEGER NOT NULL,
    expires_at       TEXT,
    submission_count INTEGER NOT NULL DEFAULT 0,
    created_at       TEXT    NOT NULL,
    updated_at       TEXT    NOT NULL,
    confirmed_at     TEXT,
    approved_at      TEXT,
    revoked_at       TEXT,
    revoked_by       INTEGER REFERENCES users (id),
    revoke_reason    TEXT
);
CREATE INDEX grants_agent ON grants (agent_id, id);
CREATE INDEX grants_repository ON grants (repository_id, id);

CREATE TABLE grant_events (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    grant_id        INTEGER NOT NULL REFERENCES grants (id),
    event           TEXT    NOT NULL,
    actor_id        INTEGER NOT NULL REFERENCES users (id),
    from_state      TEXT,
    to_state        TEXT    NOT NULL,
    state_revision  INTEGER NOT NULL,
    proposal_digest TEXT    NOT NULL,
    detail          TEXT,
    at              TEXT    NOT NULL
);
CREATE INDEX grant_events_grant ON grant_events (grant_id, id);

CREATE TABLE sessions (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    token_hash          TEXT    NOT NULL UNIQUE,
    user_id             INTEGER REFERENCES users (id),
    created_at          TEXT    NOT NULL,
    expires_at          TEXT    NOT NULL,
    absolute_expires_at TEXT    NOT NULL,
    revoked_at          TEXT
);

CREATE TABLE form_nonces (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id INTEGER NOT NULL REFERENCES sessions (id),
    nonce_hash TEXT    NOT NULL UNIQUE,
    action     TEXT    NOT NULL,
    target     TEXT    NOT NULL,
    created_at TEXT    NOT NULL,
    expires_at TEXT    NOT NULL,
    used_at    TEXT
);

CREATE TABLE login_failures (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    lower_login TEXT NOT NULL,
    at          TEXT NOT NULL
);
CREATE INDEX login_failures_login ON login_failures (lower_login, at);
