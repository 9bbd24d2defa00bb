-- guestlist idempotency keys for MySQL 8.0.13+ and MariaDB 10.3+. Table name: guestlist_keys
-- (rename every occurrence to use another). VARBINARY keys compare byte for byte. status is NULL
-- while the first attempt is in flight; body is NULL with a status when the response was too
-- large to store.
CREATE TABLE IF NOT EXISTS guestlist_keys (
    scope           VARBINARY(255) NOT NULL,
    idempotency_key VARBINARY(255) NOT NULL,
    fingerprint     VARBINARY(32)  NOT NULL,
    status          INT,
    headers         MEDIUMBLOB,
    body            LONGBLOB,
    locked_until    DATETIME(6),
    attempt         BIGINT         NOT NULL DEFAULT 1,
    token           BIGINT NOT NULL,
    created_at      DATETIME(6)    NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    holder          BIGINT,
    PRIMARY KEY (scope, idempotency_key),
    -- The purge deletes by age.
    KEY guestlist_keys_created_at_idx (created_at)
) ENGINE = InnoDB;
-- holder: the process holding the attempt in flight (a lock its session holds while it
-- lives), so that a retry can take the key over at once when that process died; NULL where
-- nothing tells (SQLite, a key kept locked): the lease decides. Added to tables made before it.
ALTER TABLE guestlist_keys ADD COLUMN holder BIGINT NULL;
-- Steps of requests (IdempotentSteps in transactional mode): a key's run and the journal of its
-- finished steps, as for the inbox's steps: handler holds the key's scope and message_id the
-- key as stored. Place 0 is the run (the token of the attempt that holds the key; name is the
-- request's fingerprint); the rows go with the stored answer.
CREATE TABLE IF NOT EXISTS guestlist_keys_steps (
    handler     VARBINARY(255) NOT NULL,
    message_id  VARBINARY(255) NOT NULL,
    place       INT            NOT NULL,
    name        VARCHAR(255)   NOT NULL,
    token       BIGINT         NOT NULL,
    lease_until BIGINT         NOT NULL,
    result      LONGBLOB,
    PRIMARY KEY (handler, message_id, place)
) ENGINE = InnoDB;
