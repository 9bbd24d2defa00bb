-- guestlist inbox for PostgreSQL. Table name: guestlist_inbox (rename every occurrence to use another).
CREATE TABLE IF NOT EXISTS guestlist_inbox (
    handler    TEXT        NOT NULL,
    message_id TEXT        NOT NULL,
    seen_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (handler, message_id)
);
-- The purge deletes by age.
CREATE INDEX IF NOT EXISTS guestlist_inbox_seen_at_idx ON guestlist_inbox (seen_at);
