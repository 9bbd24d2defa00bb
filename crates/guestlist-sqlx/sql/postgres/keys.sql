-- guestlist idempotency keys for PostgreSQL. Table name: guestlist_keys (rename every occurrence
-- to use another). status is NULL while the first attempt is in flight; body is NULL with a
-- status when the response was too large to store.
CREATE TABLE IF NOT EXISTS guestlist_keys (
    scope           TEXT        NOT NULL,
    idempotency_key TEXT        NOT NULL,
    fingerprint     BYTEA       NOT NULL,
    status          INTEGER,
    headers         BYTEA,
    body            BYTEA,
    locked_until    TIMESTAMPTZ,
    attempt         BIGINT      NOT NULL DEFAULT 1,
    token           BIGINT NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, idempotency_key)
);
-- The purge deletes by age.
CREATE INDEX IF NOT EXISTS guestlist_keys_created_at_idx ON guestlist_keys (created_at);
