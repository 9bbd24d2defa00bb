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
-- Relays take turns through one lease: the relay whose lease has not expired publishes, the others
-- stand by and take it over once it expires. Each take-over raises token; a relay stamps rows only
-- while its token still holds the lease, so one that lost it (paused, cut off) stamps nothing.
CREATE TABLE IF NOT EXISTS guestlist_outbox_relay (
    shard       INT            NOT NULL PRIMARY KEY,
    token       BIGINT         NOT NULL,
    holder      VARBINARY(255) NULL,
    lease_until DATETIME(6)    NOT NULL
) ENGINE = InnoDB;
INSERT IGNORE INTO guestlist_outbox_relay (shard, token, lease_until)
    VALUES (0, 0, '1970-01-01 00:00:01');
