-- guestlist outbox for PostgreSQL. Table name: guestlist_outbox (rename every occurrence to use
-- another). A row is an event written on the business change's own transaction; a relay publishes
-- the committed rows and stamps published_at once the broker confirmed.
CREATE TABLE IF NOT EXISTS guestlist_outbox (
    id           BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id   TEXT        NOT NULL UNIQUE,
    topic        TEXT        NOT NULL,
    ordering_key TEXT,
    -- The message's place among its ordering key's: given under the key's row lock, so that it
    -- follows commit order.
    seq          BIGINT      NOT NULL,
    headers      BYTEA,
    payload      BYTEA       NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    published_at TIMESTAMPTZ
);
-- The relay reads what is not yet published, oldest first.
CREATE INDEX IF NOT EXISTS guestlist_outbox_pending_idx ON guestlist_outbox (id)
    WHERE published_at IS NULL;
-- The purge deletes published rows by age.
CREATE INDEX IF NOT EXISTS guestlist_outbox_published_at_idx ON guestlist_outbox (published_at);
-- Each ordering key's last seq. Enqueueing on a key locks its row until the transaction ends, so
-- two transactions on one key take their seqs in the order they commit.
CREATE TABLE IF NOT EXISTS guestlist_outbox_keys (
    ordering_key TEXT   PRIMARY KEY,
    last_seq     BIGINT NOT NULL
);
