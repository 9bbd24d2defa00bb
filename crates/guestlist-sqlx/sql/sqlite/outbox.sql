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
-- The relays share the table's shards (their number is the rows here, 16 for a new table).
-- Each shard has its own lease: the relay whose lease has not expired publishes that shard's
-- rows, and the others take it once it is released or expires. Each take raises token; a relay
-- stamps a shard's rows only while its token still holds the shard's lease, so one that lost
-- it (paused, cut off) stamps nothing. shards is the count every row was taken under: a relay
-- takes a shard only under the count it planned with (guestlist outbox shards N changes it).
CREATE TABLE IF NOT EXISTS guestlist_outbox_relay (
    shard       INTEGER PRIMARY KEY,
    token       INTEGER NOT NULL,
    holder      TEXT,
    lease_until TEXT    NOT NULL
);
-- The columns shards brought, added to tables made before them (run again, each says its column
-- is there already: guestlist's migration takes that as done). A row's slot: which relay
-- publishes it, its shard being slot modulo the table's shard count; the first two bytes,
-- big-endian, of the SHA-256 of its ordering key (of its message id when it has none). A writer
-- that leaves it 0 puts the row in shard 0.
ALTER TABLE guestlist_outbox ADD COLUMN slot INTEGER NOT NULL DEFAULT 0;
ALTER TABLE guestlist_outbox_dead ADD COLUMN slot INTEGER NOT NULL DEFAULT 0;
ALTER TABLE guestlist_outbox_relay ADD COLUMN shards INTEGER NOT NULL DEFAULT 1;
-- A kept row's publisher (added the same way): the relay that stamped it, and its shard's
-- fencing token then.
ALTER TABLE guestlist_outbox ADD COLUMN published_by TEXT;
ALTER TABLE guestlist_outbox ADD COLUMN published_token INTEGER;
INSERT INTO guestlist_outbox_relay (shard, token, lease_until, shards)
    WITH RECURSIVE n(shard) AS (SELECT 0 UNION ALL SELECT shard + 1 FROM n WHERE shard < 15)
    SELECT shard, 0, '', 16 FROM n WHERE NOT EXISTS (SELECT 1 FROM guestlist_outbox_relay);
-- The relays running: each one's heartbeat, renewed while it runs and deleted when it stops.
-- Every relay computes the same fair share from it, and releases or takes shards to reach its
-- own.
CREATE TABLE IF NOT EXISTS guestlist_outbox_relays (
    holder     TEXT PRIMARY KEY,
    seen_until TEXT NOT NULL
);
