-- guestlist inbox for PostgreSQL. Table name: guestlist_inbox (rename every occurrence to use another).
CREATE TABLE IF NOT EXISTS guestlist_inbox (
    handler    TEXT        NOT NULL,
    message_id TEXT        NOT NULL,
    seen_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (handler, message_id)
);
-- The purge deletes by age.
CREATE INDEX IF NOT EXISTS guestlist_inbox_seen_at_idx ON guestlist_inbox (seen_at);
-- Deferrals: a handler said "not yet" (a downstream in flight, rate-limited or restarting), so the
-- consumer handed the message back; they do not count toward poison. A row lives until the message
-- is handled or dead-lettered. first_at is the first deferral, in Unix milliseconds.
CREATE TABLE IF NOT EXISTS guestlist_inbox_deferrals (
    handler    TEXT   NOT NULL,
    message_id TEXT   NOT NULL,
    deferrals  BIGINT NOT NULL,
    first_at   BIGINT NOT NULL,
    PRIMARY KEY (handler, message_id)
);
