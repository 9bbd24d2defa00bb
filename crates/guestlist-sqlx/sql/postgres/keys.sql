-- guestlist idempotency keys for PostgreSQL. Table name: guestlist_keys (rename every occurrence
-- to use another). status is NULL while the first attempt is in flight; body is NULL with a
-- status when the response was too large to store.
CREATE TABLE IF NOT EXISTS guestlist_keys (
    scope           TEXT        NOT NULL,
    idempotency_key TEXT        NOT NULL,
    fingerprint     BYTEA       NOT NULL,
    status          INTEGER,
    headers         BYTEA,
    body            BYTEA,
    locked_until    TIMESTAMPTZ,
    attempt         BIGINT      NOT NULL DEFAULT 1,
    token           BIGINT NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    holder          BIGINT,
    waited          BOOLEAN,
    PRIMARY KEY (scope, idempotency_key)
);
-- The purge deletes by age.
CREATE INDEX IF NOT EXISTS guestlist_keys_created_at_idx ON guestlist_keys (created_at);
-- holder: the process holding the attempt in flight (a lock its session holds while it
-- lives), so that a retry can take the key over at once when that process died; NULL where
-- nothing tells (SQLite, a key kept locked): the lease decides. waited: a request of another
-- process waits on the key in flight, so that its answer or release notifies (pg_notify on a
-- channel named as the table). Both added to tables made before them.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()
                   AND table_name = lower('guestlist_keys') AND column_name = 'waited') THEN
        ALTER TABLE guestlist_keys ADD COLUMN IF NOT EXISTS holder BIGINT;
        ALTER TABLE guestlist_keys ADD COLUMN IF NOT EXISTS waited BOOLEAN;
    END IF;
END
$$;
-- Steps of requests (IdempotentSteps in transactional mode): a key's run and the journal of its
-- finished steps, as for the inbox's steps: handler holds the key's scope and message_id the
-- key as stored. Place 0 is the run (the token of the attempt that holds the key; name is the
-- request's fingerprint); the rows go with the stored answer.
CREATE TABLE IF NOT EXISTS guestlist_keys_steps (
    handler     TEXT COLLATE "C" NOT NULL,
    message_id  TEXT COLLATE "C" NOT NULL,
    place       INTEGER          NOT NULL,
    name        TEXT             NOT NULL,
    token       BIGINT           NOT NULL,
    lease_until BIGINT           NOT NULL,
    result      BYTEA,
    PRIMARY KEY (handler, message_id, place)
);
