-- guestlist inbox for PostgreSQL. Table name: guestlist_inbox (rename every occurrence to use another).
-- COLLATE "C": ids compare byte for byte, as memcmp, not through the database's locale.
-- Equality is the same either way; only the order inside the index changes.
-- autovacuum_vacuum_scale_factor: the purge deletes rows and nothing else does. At the default
-- 0.2 a day's purge (a seventh of a week's rows) leaves its dead rows unvacuumed until the next
-- day's, and the new day's rows extend the table instead of taking their space.
CREATE TABLE IF NOT EXISTS guestlist_inbox (
    handler    TEXT COLLATE "C" NOT NULL,
    message_id TEXT COLLATE "C" NOT NULL,
    seen_at    TIMESTAMPTZ      NOT NULL DEFAULT now(),
    PRIMARY KEY (handler, message_id)
) WITH (autovacuum_vacuum_scale_factor = 0.02);
-- The purge deletes by age. seen_at only grows, so new entries go to the index's right edge and
-- its pages can be filled whole (the default leaves a tenth of each one empty).
CREATE INDEX IF NOT EXISTS guestlist_inbox_seen_at_idx ON guestlist_inbox (seen_at)
    WITH (fillfactor = 100);
-- Deferrals: a handler said "not yet" (a downstream in flight, rate-limited or restarting), so the
-- consumer handed the message back; they do not count toward poison. A row lives until the message
-- is handled or dead-lettered. first_at is the first deferral, in Unix milliseconds.
CREATE TABLE IF NOT EXISTS guestlist_inbox_deferrals (
    handler    TEXT COLLATE "C" NOT NULL,
    message_id TEXT COLLATE "C" NOT NULL,
    deferrals  BIGINT           NOT NULL,
    first_at   BIGINT           NOT NULL,
    PRIMARY KEY (handler, message_id)
);
-- Incoming dead letters: messages a consumer moved to its broker's dead-letter place (poison: it
-- failed too often, or was deferred past its limit), recorded beside the guest list so that
-- operators see them with the rest (guestlist console, guestlist trace); the message itself is
-- in the broker's dead-letter place. dead_at is when, in Unix milliseconds; deliveries, the
-- broker's count then.
CREATE TABLE IF NOT EXISTS guestlist_inbox_dead (
    handler    TEXT COLLATE "C" NOT NULL,
    message_id TEXT COLLATE "C" NOT NULL,
    reason     TEXT             NOT NULL,
    deliveries BIGINT           NOT NULL,
    dead_at    BIGINT           NOT NULL,
    PRIMARY KEY (handler, message_id)
);
-- Steps (Inbox::process_steps): a message's run and the journal of its finished steps. Place 0
-- is the run: the fencing token of the run that holds the message and its lease's end (Unix
-- milliseconds). Places 1 and on are the finished steps in the order the handler asked for them:
-- the name, the token of the run that journaled it, when (Unix ms) and the result. The rows go
-- with the final commit (or stay, with Inbox::keep_journals); the inbox's purge forgets a
-- message's rows once its run was last touched longer ago than the retention.
CREATE TABLE IF NOT EXISTS guestlist_inbox_steps (
    handler     TEXT COLLATE "C" NOT NULL,
    message_id  TEXT COLLATE "C" NOT NULL,
    place       INTEGER          NOT NULL,
    name        TEXT             NOT NULL,
    token       BIGINT           NOT NULL,
    lease_until BIGINT           NOT NULL,
    result      BYTEA,
    PRIMARY KEY (handler, message_id, place)
);
-- An incoming dead letter's copy, for a retry from guestlist (added to tables made before it):
-- where it goes back to (the subject, queue or topic the consumer reads), the broker's key, its
-- headers (a `name: value` line each) and body, kept up to 4 MiB. state is 'dead',
-- 'retrying' (published, or about to be, by retried_by at retried_at) or 'retried' (the broker
-- confirmed it); retries counts them. A retried message dead-lettered again is 'dead' again.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()
                   AND table_name = lower('guestlist_inbox_dead') AND column_name = 'body') THEN
        ALTER TABLE guestlist_inbox_dead ADD COLUMN IF NOT EXISTS topic TEXT;
        ALTER TABLE guestlist_inbox_dead ADD COLUMN IF NOT EXISTS msg_key TEXT;
        ALTER TABLE guestlist_inbox_dead ADD COLUMN IF NOT EXISTS headers BYTEA;
        ALTER TABLE guestlist_inbox_dead ADD COLUMN IF NOT EXISTS body BYTEA;
        ALTER TABLE guestlist_inbox_dead ADD COLUMN IF NOT EXISTS state TEXT NOT NULL DEFAULT 'dead';
        ALTER TABLE guestlist_inbox_dead ADD COLUMN IF NOT EXISTS retries BIGINT NOT NULL DEFAULT 0;
        ALTER TABLE guestlist_inbox_dead ADD COLUMN IF NOT EXISTS retried_at BIGINT;
        ALTER TABLE guestlist_inbox_dead ADD COLUMN IF NOT EXISTS retried_by TEXT;
    END IF;
END
$$;
-- The purge of the dead letters goes by age.
CREATE INDEX IF NOT EXISTS guestlist_inbox_dead_at_idx ON guestlist_inbox_dead (dead_at);
