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
    published_at TIMESTAMPTZ,
    -- A kept row's publisher: the relay that stamped it, and its shard's fencing token then.
    published_by    TEXT,
    published_token BIGINT,
    -- Which relay publishes the row: its shard is slot modulo the table's shard count. The
    -- first two bytes, big-endian, of the SHA-256 of its ordering key (of its message id when
    -- it has none); a writer that leaves it 0 puts the row in shard 0.
    slot         INTEGER     NOT NULL DEFAULT 0
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
    reason       TEXT        NOT NULL,
    slot         INTEGER     NOT NULL DEFAULT 0
);
-- Each ordering key's last seq. Enqueueing on a key locks its row until the transaction ends, so
-- two transactions on one key take their seqs in the order they commit.
CREATE TABLE IF NOT EXISTS guestlist_outbox_keys (
    ordering_key TEXT   PRIMARY KEY,
    last_seq     BIGINT NOT NULL
);
-- The relays share the table's shards (their number is the rows here, 16 for a new table).
-- Each shard has its own lease: the relay whose lease has not expired publishes that shard's
-- rows, and the others take it once it is released or expires. Each take raises token; a relay
-- stamps a shard's rows only while its token still holds the shard's lease, so one that lost
-- it (paused, cut off) stamps nothing. shards is the count every row was taken under: a relay
-- takes a shard only under the count it planned with (guestlist outbox shards N changes it).
CREATE TABLE IF NOT EXISTS guestlist_outbox_relay (
    shard       INTEGER     PRIMARY KEY,
    token       BIGINT      NOT NULL,
    holder      TEXT,
    lease_until TIMESTAMPTZ NOT NULL,
    shards      INTEGER     NOT NULL DEFAULT 1
);
-- Tables made before shards: their rows gain a slot (0: shard 0), and their single lease
-- becomes a table of one shard (guestlist outbox shards N spreads it). The catalog is read
-- first, so that a table that has them takes no lock; unquoted names are stored in lower case.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()
                   AND table_name = lower('guestlist_outbox') AND column_name = 'slot') THEN
        ALTER TABLE guestlist_outbox ADD COLUMN IF NOT EXISTS slot INTEGER NOT NULL DEFAULT 0;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()
                   AND table_name = lower('guestlist_outbox_dead') AND column_name = 'slot') THEN
        ALTER TABLE guestlist_outbox_dead ADD COLUMN IF NOT EXISTS slot INTEGER NOT NULL DEFAULT 0;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()
                   AND table_name = lower('guestlist_outbox_relay') AND column_name = 'shards') THEN
        ALTER TABLE guestlist_outbox_relay ADD COLUMN IF NOT EXISTS shards INTEGER NOT NULL DEFAULT 1;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()
                   AND table_name = lower('guestlist_outbox') AND column_name = 'published_by') THEN
        ALTER TABLE guestlist_outbox ADD COLUMN IF NOT EXISTS published_by TEXT;
        ALTER TABLE guestlist_outbox ADD COLUMN IF NOT EXISTS published_token BIGINT;
    END IF;
END
$$;
INSERT INTO guestlist_outbox_relay (shard, token, lease_until, shards)
    SELECT shard, 0, '-infinity', 16 FROM generate_series(0, 15) AS shard
    WHERE NOT EXISTS (SELECT 1 FROM guestlist_outbox_relay);
-- The relays running: each one's heartbeat, renewed while it runs and deleted when it stops.
-- Every relay computes the same fair share from it, and releases or takes shards to reach its
-- own.
CREATE TABLE IF NOT EXISTS guestlist_outbox_relays (
    holder     TEXT        PRIMARY KEY,
    seen_until TIMESTAMPTZ NOT NULL
);
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
