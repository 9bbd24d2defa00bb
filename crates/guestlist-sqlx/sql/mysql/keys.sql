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
    PRIMARY KEY (scope, idempotency_key),
    -- The purge deletes by age.
    KEY guestlist_keys_created_at_idx (created_at)
) ENGINE = InnoDB;
