-- guestlist outbox for PostgreSQL. Table name: guestlist_outbox (rename every occurrence to use
-- another). A row is an event written on the business change's own transaction; a relay publishes
-- the committed rows and deletes each once the broker confirmed it
-- (a relay told to keep them stamps published_at instead, and the purge deletes them by age).
CREATE TABLE IF NOT EXISTS guestlist_outbox (
    id           BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id   TEXT        NOT NULL UNIQUE,
    topic        TEXT        NOT NULL,
    ordering_key TEXT,
    -- The message's place among its ordering key's: given under the key's row lock, so that it
    -- follows commit order.
    seq          BIGINT      NOT NULL,
    headers      BYTEA,
    payload      BYTEA       NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    published_at TIMESTAMPTZ
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
    id           BIGINT      PRIMARY KEY,
    message_id   TEXT        NOT NULL,
    topic        TEXT        NOT NULL,
    ordering_key TEXT,
    seq          BIGINT      NOT NULL,
    headers      BYTEA,
    payload      BYTEA       NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    dead_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    reason       TEXT        NOT NULL
);
-- Each ordering key's last seq. Enqueueing on a key locks its row until the transaction ends, so
-- two transactions on one key take their seqs in the order they commit.
CREATE TABLE IF NOT EXISTS guestlist_outbox_keys (
    ordering_key TEXT   PRIMARY KEY,
    last_seq     BIGINT NOT NULL
);
-- Relays take turns through one lease: the relay whose lease has not expired publishes, the others
-- stand by and take it over once it expires. Each take-over raises token; a relay stamps rows only
-- while its token still holds the lease, so one that lost it (paused, cut off) stamps nothing.
CREATE TABLE IF NOT EXISTS guestlist_outbox_relay (
    shard       INTEGER     PRIMARY KEY,
    token       BIGINT      NOT NULL,
    holder      TEXT,
    lease_until TIMESTAMPTZ NOT NULL
);
INSERT INTO guestlist_outbox_relay (shard, token, lease_until) VALUES (0, 0, '-infinity')
    ON CONFLICT (shard) DO NOTHING;
-- Wakes the relay when messages commit (LISTEN guestlist_outbox), whichever program wrote them;
-- the relay polls as well, so a missed notification only costs a poll interval.
CREATE OR REPLACE FUNCTION guestlist_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('guestlist_outbox', '');
    RETURN NULL;
END
$$;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                   WHERE tgname = 'guestlist_outbox_notify'
                     AND tgrelid = 'guestlist_outbox'::regclass) THEN
        CREATE TRIGGER guestlist_outbox_notify AFTER INSERT ON guestlist_outbox
            FOR EACH STATEMENT EXECUTE FUNCTION guestlist_outbox_notify();
    END IF;
END
$$;
