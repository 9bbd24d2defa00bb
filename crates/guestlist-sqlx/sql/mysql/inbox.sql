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
-- Deferrals: a handler said "not yet" (a downstream in flight, rate-limited or restarting), so the
-- consumer handed the message back; they do not count toward poison. A row lives until the message
-- is handled or dead-lettered. first_at is the first deferral, in Unix milliseconds.
CREATE TABLE IF NOT EXISTS guestlist_inbox_deferrals (
    handler    VARBINARY(255) NOT NULL,
    message_id VARBINARY(255) NOT NULL,
    deferrals  BIGINT         NOT NULL,
    first_at   BIGINT         NOT NULL,
    PRIMARY KEY (handler, message_id)
) ENGINE = InnoDB;
-- Incoming dead letters: messages a consumer moved to its broker's dead-letter place (poison: it
-- failed too often, or was deferred past its limit), recorded beside the guest list so that
-- operators see them with the rest (guestlist console, guestlist trace); the message itself is
-- in the broker's dead-letter place. dead_at is when, in Unix milliseconds; deliveries, the
-- broker's count then.
CREATE TABLE IF NOT EXISTS guestlist_inbox_dead (
    handler    VARBINARY(255) NOT NULL,
    message_id VARBINARY(255) NOT NULL,
    reason     TEXT           NOT NULL,
    deliveries BIGINT         NOT NULL,
    dead_at    BIGINT         NOT NULL,
    PRIMARY KEY (handler, message_id)
) ENGINE = InnoDB;
-- Steps (Inbox::process_steps): a message's run and the journal of its finished steps. Place 0
-- is the run: the fencing token of the run that holds the message and its lease's end (Unix
-- milliseconds). Places 1 and on are the finished steps in the order the handler asked for them:
-- the name, the token of the run that journaled it, when (Unix ms) and the result. The rows go
-- with the final commit (or stay, with Inbox::keep_journals); the inbox's purge forgets a
-- message's rows once its run was last touched longer ago than the retention.
CREATE TABLE IF NOT EXISTS guestlist_inbox_steps (
    handler     VARBINARY(255) NOT NULL,
    message_id  VARBINARY(255) NOT NULL,
    place       INT            NOT NULL,
    name        VARCHAR(255)   NOT NULL,
    token       BIGINT         NOT NULL,
    lease_until BIGINT         NOT NULL,
    result      LONGBLOB,
    PRIMARY KEY (handler, message_id, place)
) ENGINE = InnoDB;
-- An incoming dead letter's copy, for a retry from guestlist (added the same way to tables made
-- before it): where it goes back to (the subject, queue or topic the consumer reads), the
-- broker's key, its headers (a `name: value` line each) and body, kept up to 4 MiB.
-- state is 'dead', 'retrying' (published, or about to be, by retried_by at retried_at) or
-- 'retried' (the broker confirmed it); retries counts them. A retried message dead-lettered
-- again is 'dead' again.
ALTER TABLE guestlist_inbox_dead ADD COLUMN topic TEXT NULL;
ALTER TABLE guestlist_inbox_dead ADD COLUMN msg_key TEXT NULL;
ALTER TABLE guestlist_inbox_dead ADD COLUMN headers LONGBLOB NULL;
ALTER TABLE guestlist_inbox_dead ADD COLUMN body LONGBLOB NULL;
ALTER TABLE guestlist_inbox_dead ADD COLUMN state VARCHAR(16) NOT NULL DEFAULT 'dead';
ALTER TABLE guestlist_inbox_dead ADD COLUMN retries BIGINT NOT NULL DEFAULT 0;
ALTER TABLE guestlist_inbox_dead ADD COLUMN retried_at BIGINT NULL;
ALTER TABLE guestlist_inbox_dead ADD COLUMN retried_by TEXT NULL;
