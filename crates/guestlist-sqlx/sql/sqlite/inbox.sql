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
-- Deferrals: a handler said "not yet" (a downstream in flight, rate-limited or restarting), so the
-- consumer handed the message back; they do not count toward poison. A row lives until the message
-- is handled or dead-lettered. first_at is the first deferral, in Unix milliseconds.
CREATE TABLE IF NOT EXISTS guestlist_inbox_deferrals (
    handler    TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    deferrals  INTEGER NOT NULL,
    first_at   INTEGER NOT NULL,
    PRIMARY KEY (handler, message_id)
);
-- Incoming dead letters: messages a consumer moved to its broker's dead-letter place (poison: it
-- failed too often, or was deferred past its limit), recorded beside the guest list so that
-- operators see them with the rest (guestlist console, guestlist trace); the message itself is
-- in the broker's dead-letter place. dead_at is when, in Unix milliseconds; deliveries, the
-- broker's count then.
CREATE TABLE IF NOT EXISTS guestlist_inbox_dead (
    handler    TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    reason     TEXT    NOT NULL,
    deliveries INTEGER NOT NULL,
    dead_at    INTEGER NOT NULL,
    PRIMARY KEY (handler, message_id)
);
-- Steps (Inbox::process_steps): a message's run and the journal of its finished steps. Place 0
-- is the run: the fencing token of the run that holds the message and its lease's end (Unix
-- milliseconds). Places 1 and on are the finished steps in the order the handler asked for them:
-- the name, the token of the run that journaled it, when (Unix ms) and the result. The rows go
-- with the final commit (or stay, with Inbox::keep_journals); the inbox's purge forgets a
-- message's rows once its run was last touched longer ago than the retention.
CREATE TABLE IF NOT EXISTS guestlist_inbox_steps (
    handler     TEXT    NOT NULL,
    message_id  TEXT    NOT NULL,
    place       INTEGER NOT NULL,
    name        TEXT    NOT NULL,
    token       INTEGER NOT NULL,
    lease_until INTEGER NOT NULL,
    result      BLOB,
    PRIMARY KEY (handler, message_id, place)
);
-- An incoming dead letter's copy, for a retry from guestlist (added the same way to tables made
-- before it): where it goes back to (the subject, queue or topic the consumer reads), the
-- broker's key, its headers (a `name: value` line each) and body, kept up to 4 MiB.
-- state is 'dead', 'retrying' (published, or about to be, by retried_by at retried_at) or
-- 'retried' (the broker confirmed it); retries counts them. A retried message dead-lettered
-- again is 'dead' again.
ALTER TABLE guestlist_inbox_dead ADD COLUMN topic TEXT NULL;
ALTER TABLE guestlist_inbox_dead ADD COLUMN msg_key TEXT NULL;
ALTER TABLE guestlist_inbox_dead ADD COLUMN headers BLOB NULL;
ALTER TABLE guestlist_inbox_dead ADD COLUMN body BLOB NULL;
ALTER TABLE guestlist_inbox_dead ADD COLUMN state TEXT NOT NULL DEFAULT 'dead';
ALTER TABLE guestlist_inbox_dead ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE guestlist_inbox_dead ADD COLUMN retried_at INTEGER NULL;
ALTER TABLE guestlist_inbox_dead ADD COLUMN retried_by TEXT NULL;
-- The purge of the dead letters goes by age.
CREATE INDEX IF NOT EXISTS guestlist_inbox_dead_at_idx ON guestlist_inbox_dead (dead_at);
