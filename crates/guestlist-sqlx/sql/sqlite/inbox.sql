-- guestlist inbox for SQLite. Table name: guestlist_inbox (rename every occurrence to use another).
-- seen_at is UTC text with milliseconds, so that it sorts and compares as time.
CREATE TABLE IF NOT EXISTS guestlist_inbox (
    handler    TEXT NOT NULL,
    message_id TEXT NOT NULL,
    seen_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    PRIMARY KEY (handler, message_id)
);
-- The purge deletes by age.
CREATE INDEX IF NOT EXISTS guestlist_inbox_seen_at_idx ON guestlist_inbox (seen_at);
