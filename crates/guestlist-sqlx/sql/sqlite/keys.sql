-- guestlist idempotency keys for SQLite. Table name: guestlist_keys (rename every occurrence to
-- use another). Times are UTC text with milliseconds. status is NULL while the first attempt is
-- in flight; body is NULL with a status when the response was too large to store.
CREATE TABLE IF NOT EXISTS guestlist_keys (
    scope           TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    fingerprint     BLOB    NOT NULL,
    status          INTEGER,
    headers         BLOB,
    body            BLOB,
    locked_until    TEXT,
    attempt         INTEGER NOT NULL DEFAULT 1,
    token           INTEGER NOT NULL,
    created_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    PRIMARY KEY (scope, idempotency_key)
);
-- The purge deletes by age.
CREATE INDEX IF NOT EXISTS guestlist_keys_created_at_idx ON guestlist_keys (created_at);
