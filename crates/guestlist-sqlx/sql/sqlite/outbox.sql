-- guestlist outbox for SQLite. Table name: guestlist_outbox (rename every occurrence to use
-- another). A row is an event written on the business change's own transaction; a relay publishes
-- the committed rows and deletes each once the broker confirmed it
-- (a relay told to keep them stamps published_at instead, and the purge deletes them by age).
-- Times are UTC text with milliseconds, so that they sort and compare as time.
CREATE TABLE IF NOT EXISTS guestlist_outbox (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id   TEXT    NOT NULL UNIQUE,
    topic        TEXT    NOT NULL,
    ordering_key TEXT,
    -- The message's place among its ordering key's: SQLite has one writer, so it follows
    -- commit order.
    seq          INTEGER NOT NULL,
    headers      BLOB,
    payload      BLOB    NOT NULL,
    created_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    published_at TEXT
);
-- The relay reads what is not yet published, oldest first.
CREATE INDEX IF NOT EXISTS guestlist_outbox_pending_idx ON guestlist_outbox (id)
    WHERE published_at IS NULL;
-- The purge deletes published rows by age.
CREATE INDEX IF NOT EXISTS guestlist_outbox_published_at_idx ON guestlist_outbox (published_at);
-- The outgoing dead letters: messages a broker refused for good, or too many times, moved here with
-- why, so that their ordering key moves on. Operators list, retry and drop them
-- (guestlist outbox dead list | retry ID | drop ID); a retried message goes back to the outbox.
CREATE TABLE IF NOT EXISTS guestlist_outbox_dead (
    id           INTEGER PRIMARY KEY,
    message_id   TEXT    NOT NULL,
    topic        TEXT    NOT NULL,
    ordering_key TEXT,
    seq          INTEGER NOT NULL,
    headers      BLOB,
    payload      BLOB    NOT NULL,
    created_at   TEXT    NOT NULL,
    dead_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    reason       TEXT    NOT NULL
);
-- Each ordering key's last seq.
CREATE TABLE IF NOT EXISTS guestlist_outbox_keys (
    ordering_key TEXT    PRIMARY KEY,
    last_seq     INTEGER NOT NULL
);
-- Relays take turns through one lease: the relay whose lease has not expired publishes, the others
-- stand by and take it over once it expires. Each take-over raises token; a relay stamps rows only
-- while its token still holds the lease, so one that lost it (paused, cut off) stamps nothing.
CREATE TABLE IF NOT EXISTS guestlist_outbox_relay (
    shard       INTEGER PRIMARY KEY,
    token       INTEGER NOT NULL,
    holder      TEXT,
    lease_until TEXT    NOT NULL
);
INSERT OR IGNORE INTO guestlist_outbox_relay (shard, token, lease_until) VALUES (0, 0, '');
