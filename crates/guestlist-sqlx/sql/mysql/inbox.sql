-- guestlist inbox for MySQL 8.0.13+ and MariaDB 10.3+. Table name: guestlist_inbox (rename every
-- occurrence to use another).
-- VARBINARY compares byte for byte: a case-insensitive or PAD SPACE collation would make
-- 'evt_A', 'evt_a' and 'evt_a ' one message, and drop two of them as duplicates.
CREATE TABLE IF NOT EXISTS guestlist_inbox (
    handler    VARBINARY(255) NOT NULL,
    message_id VARBINARY(255) NOT NULL,
    seen_at    DATETIME(6)    NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (handler, message_id),
    -- The purge deletes by age.
    KEY guestlist_inbox_seen_at_idx (seen_at)
) ENGINE = InnoDB;
