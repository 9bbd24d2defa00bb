//! PostgreSQL's outbox statements.

use sqlx::Postgres;
use sqlx::postgres::PgConnection;

use crate::backend::sealed::OutboxStatements;

impl OutboxStatements for Postgres {
    const OUTBOX_DDL: &'static str = include_str!("../../../sql/postgres/outbox.sql");
    // The upsert locks the key's row until the transaction ends: a second transaction on the
    // key waits here, and takes the next seq once the first has committed or rolled back.
    const OUTBOX_NEXT_SEQ: &'static str = "INSERT INTO {table}_keys AS k (ordering_key, last_seq) \
         VALUES ($1, 1) ON CONFLICT (ordering_key) DO UPDATE SET last_seq = k.last_seq + 1 \
         RETURNING last_seq";
    const OUTBOX_INSERT: &'static str = "INSERT INTO {table} \
         (message_id, topic, ordering_key, seq, headers, payload) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (message_id) DO NOTHING";

    crate::backend::outbox_with_returning!(PgConnection);
}
