-- guestlist outbox for MySQL 8.0.13+ and MariaDB 10.3+. Table name: guestlist_outbox (rename every
-- occurrence to use another). A row is an event written on the business change's own transaction;
-- a relay publishes the committed rows and deletes each once the broker confirmed it
-- (a relay told to keep them stamps published_at instead, and the purge deletes them by age).
-- VARBINARY compares byte for byte, as message ids and keys must.
CREATE TABLE IF NOT EXISTS guestlist_outbox (
    id           BIGINT         NOT NULL AUTO_INCREMENT PRIMARY KEY,
    message_id   VARBINARY(255) NOT NULL,
    topic        VARBINARY(255) NOT NULL,
    ordering_key VARBINARY(255) NULL,
    -- The message's place among its ordering key's: given under the key's row lock, so that it
    -- follows commit order.
    seq          BIGINT         NOT NULL,
    headers      LONGBLOB       NULL,
    payload      LONGBLOB       NOT NULL,
    created_at   DATETIME(6)    NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    published_at DATETIME(6)    NULL,
    UNIQUE KEY guestlist_outbox_message_id_key (message_id),
    -- The relay reads what is not yet published, oldest first; the purge deletes published rows
    -- by age.
    KEY guestlist_outbox_published_at_idx (published_at, id)
) ENGINE = InnoDB;
-- The outgoing dead letters: messages a broker refused for good, or too many times, moved here with
-- why, so that their ordering key moves on. Operators list, retry and drop them
-- (guestlist outbox dead list | retry ID | drop ID); a retried message goes back to the outbox.
CREATE TABLE IF NOT EXISTS guestlist_outbox_dead (
    id           BIGINT         NOT NULL PRIMARY KEY,
    message_id   VARBINARY(255) NOT NULL,
    topic        VARBINARY(255) NOT NULL,
    ordering_key VARBINARY(255) NULL,
    seq          BIGINT         NOT NULL,
    headers      LONGBLOB       NULL,
    payload      LONGBLOB       NOT NULL,
    created_at   DATETIME(6)    NOT NULL,
    dead_at      DATETIME(6)    NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    reason       TEXT           NOT NULL
) ENGINE = InnoDB;
-- Each ordering key's last seq. Enqueueing on a key locks its row until the transaction ends, so
-- two transactions on one key take their seqs in the order they commit.
CREATE TABLE IF NOT EXISTS guestlist_outbox_keys (
    ordering_key VARBINARY(255) NOT NULL PRIMARY KEY,
    last_seq     BIGINT         NOT NULL
) ENGINE = InnoDB;
-- The relays share the table's shards (their number is the rows here, 16 for a new table).
-- Each shard has its own lease: the relay whose lease has not expired publishes that shard's
-- rows, and the others take it once it is released or expires. Each take raises token; a relay
-- stamps a shard's rows only while its token still holds the shard's lease, so one that lost
-- it (paused, cut off) stamps nothing. shards is the count every row was taken under: a relay
-- takes a shard only under the count it planned with (guestlist outbox shards N changes it).
CREATE TABLE IF NOT EXISTS guestlist_outbox_relay (
    shard       INT            NOT NULL PRIMARY KEY,
    token       BIGINT         NOT NULL,
    holder      VARBINARY(255) NULL,
    lease_until DATETIME(6)    NOT NULL
) ENGINE = InnoDB;
-- The columns shards brought, added to tables made before them (run again, each says its column
-- is there already: guestlist's migration takes that as done). A row's slot: which relay
-- publishes it, its shard being slot modulo the table's shard count; the first two bytes,
-- big-endian, of the SHA-256 of its ordering key (of its message id when it has none). A writer
-- that leaves it 0 puts the row in shard 0.
ALTER TABLE guestlist_outbox ADD COLUMN slot INT NOT NULL DEFAULT 0;
ALTER TABLE guestlist_outbox_dead ADD COLUMN slot INT NOT NULL DEFAULT 0;
ALTER TABLE guestlist_outbox_relay ADD COLUMN shards INT NOT NULL DEFAULT 1;
-- A kept row's publisher (added the same way): the relay that stamped it, and its shard's
-- fencing token then.
ALTER TABLE guestlist_outbox ADD COLUMN published_by VARBINARY(255) NULL;
ALTER TABLE guestlist_outbox ADD COLUMN published_token BIGINT NULL;
INSERT INTO guestlist_outbox_relay (shard, token, lease_until, shards)
    SELECT n.shard, 0, '1970-01-01 00:00:01', 16 FROM (SELECT 0 AS shard UNION ALL SELECT 1
        UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5
        UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9
        UNION ALL SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13
        UNION ALL SELECT 14 UNION ALL SELECT 15) AS n
    WHERE NOT EXISTS (SELECT 1 FROM guestlist_outbox_relay);
-- The relays running: each one's heartbeat, renewed while it runs and deleted when it stops.
-- Every relay computes the same fair share from it, and releases or takes shards to reach its
-- own.
CREATE TABLE IF NOT EXISTS guestlist_outbox_relays (
    holder     VARBINARY(255) NOT NULL PRIMARY KEY,
    seen_until DATETIME(6)    NOT NULL
) ENGINE = InnoDB;
