-- Webhook subscriptions and their delivery outbox (docs/events.md
-- "Webhooks"). A delivery row is written in the same transaction as its
-- event, one per matching enabled subscription; workers lease due rows,
-- POST them and record each attempt on the row.
--
-- `secret` is the signing secret as shown once at creation (`whsec_…`):
-- Writ must hold the key to sign. `previous_secret` signs too until
-- `previous_until` (a rotation's 24 h). The subscription's `types` and
-- `repos` are its patterns as given; the delivery insert matches the
-- expanded rows of `webhook_subscription_types` (exact event types) and
-- `webhook_subscription_repos` (owner, and name or NULL for `owner/*`,
-- lowercased); no row in a table means "all".

CREATE TABLE webhook_subscriptions (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    url                  TEXT    NOT NULL,
    types                TEXT    NOT NULL,
    repos                TEXT    NOT NULL,
    format               TEXT    NOT NULL CHECK (format IN ('standard', 'slack')),
    description          TEXT    NOT NULL,
    enabled              BOOLEAN NOT NULL,
    secret               TEXT    NOT NULL,
    previous_secret      TEXT,
    previous_until       TEXT,
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    disabled_at          TEXT,
    created_at           TEXT    NOT NULL,
    updated_at           TEXT    NOT NULL,
    deleted_at           TEXT
);

CREATE TABLE webhook_subscription_types (
    subscription_id INTEGER NOT NULL REFERENCES webhook_subscriptions (id),
    type            TEXT    NOT NULL,
    PRIMARY KEY (subscription_id, type)
);

CREATE TABLE webhook_subscription_repos (
    subscription_id INTEGER NOT NULL REFERENCES webhook_subscriptions (id),
    owner           TEXT    NOT NULL,
    name            TEXT
);
CREATE INDEX webhook_subscription_repos_subscription ON webhook_subscription_repos (subscription_id);

CREATE TABLE webhook_deliveries (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    subscription_id  INTEGER NOT NULL REFERENCES webhook_subscriptions (id),
    event_id         INTEGER NOT NULL REFERENCES events (id),
    status           TEXT    NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  TEXT    NOT NULL,
    lease_until      TEXT,
    last_attempt_at  TEXT,
    last_status_code INTEGER,
    last_error       TEXT,
    delivered_at     TEXT,
    created_at       TEXT    NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_subscription ON webhook_deliveries (subscription_id, id);

CREATE VIEW report_webhook_deliveries_v1 AS
SELECT d.id AS delivery_id, d.subscription_id, d.event_id, e.type AS event_type,
       d.status, d.attempts, d.last_attempt_at, d.last_status_code, d.last_error,
       d.delivered_at
FROM webhook_deliveries d JOIN events e ON e.id = d.event_id;
