-- Client addresses for the login throttle and the pre-login session caps
-- (docs/runbook.md "Login throttling").
--
-- `login_failures.address`: the client address of a failed login (an IPv4
-- address or an IPv6 /64 network, as text); the strict throttle counts per
-- (login, address). Rows recorded before this column existed have none and
-- count only towards the per-login ceiling.
-- `login_addresses`: the addresses each user has logged in from; the
-- per-login ceiling never applies to them.
-- `sessions.address`: the client address a pre-login session was opened
-- from, for the per-address cap on pre-login sessions.

ALTER TABLE login_failures ADD COLUMN address TEXT;
CREATE INDEX login_failures_address ON login_failures (lower_login, address, at);

CREATE TABLE login_addresses (
    user_id       BIGINT  NOT NULL REFERENCES users (id),
    address       TEXT    NOT NULL,
    last_login_at TEXT    NOT NULL,
    PRIMARY KEY (user_id, address)
);

ALTER TABLE sessions ADD COLUMN address TEXT;
CREATE INDEX sessions_prelogin ON sessions (id) WHERE user_id IS NULL;
CREATE INDEX sessions_prelogin_address ON sessions (address, id) WHERE user_id IS NULL;
