//! Filling an inbox with millions of rows on the server, in each backend's SQL.
//!
//! Rows are made by the database itself (`generate_series` on PostgreSQL, a recursive CTE on
//! SQLite, a cross join of digits on MySQL), a chunk per statement, never row by row from here.
//! Their `seen_at` is spread evenly over the week before now, oldest first, so the table's
//! physical order follows time as it does when rows arrive one by one.

use std::future::Future;

use guestlist::sqlx::{self, Pool};

use super::workload::Workload;

/// Clients whose scopes the preloaded keys are spread over.
pub(super) const CLIENTS: u64 = 1_000;
/// The stored body's size, as the HTTP bench's handlers answer.
pub(super) const BODY_BYTES: usize = 512;

/// The shape of the message ids a table is filled with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// `evt_` and 22 random base62 characters, as Stripe's event ids (26 bytes).
    Evt,
    /// A random UUID in text (36 bytes).
    Uuid,
    /// `sha256:` and 64 hex digits, as a key derived from a body's bytes (71 bytes).
    Sha256,
    /// A third of each, in turn.
    Mixed,
}

impl Shape {
    pub(super) const EACH: [Shape; 3] = [Shape::Evt, Shape::Uuid, Shape::Sha256];

    pub(super) fn name(self) -> &'static str {
        match self {
            Shape::Evt => "evt",
            Shape::Uuid => "uuid",
            Shape::Sha256 => "sha256",
            Shape::Mixed => "mixed",
        }
    }

    /// A fresh random id of this shape, for the claims the bench makes itself.
    pub(super) fn random_id(self, n: u64) -> String {
        let shape = match self {
            Shape::Mixed => Shape::EACH[(n % 3) as usize],
            one => one,
        };
        match shape {
            Shape::Evt => {
                let tail: String = std::iter::repeat_with(fastrand::alphanumeric)
                    .take(22)
                    .collect();
                format!("evt_{tail}")
            }
            Shape::Uuid => {
                let v = fastrand::u128(..);
                format!(
                    "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                    v >> 96,
                    (v >> 80) & 0xffff,
                    (v >> 64) & 0xffff,
                    (v >> 48) & 0xffff,
                    v & 0xffff_ffff_ffff
                )
            }
            Shape::Sha256 | Shape::Mixed => {
                format!(
                    "sha256:{:032x}{:032x}",
                    fastrand::u128(..),
                    fastrand::u128(..)
                )
            }
        }
    }
}

/// A backend's SQL for filling an inbox.
pub(super) trait Preload: Workload {
    /// Rows per statement.
    const CHUNK: u64;
    /// The statement that refreshes a table's statistics, followed by its name.
    const ANALYZE: &'static str;
    /// Statements run once before the first chunk (helper tables).
    const PREPARE: &'static [&'static str] = &[];
    /// What flushes the last figure's writes before the next figure runs (a checkpoint).
    const SETTLE: &'static str;

    /// Inserts the rows numbered `from..=to` of `total` into `table`, as `shape`, under the
    /// handler `warehouse`.
    fn chunk(table: &str, shape: Shape, from: u64, to: u64, total: u64) -> String;

    /// Inserts the stored responses numbered `from..=to` of `total` into the key table `table`:
    /// a UUID key, the scope of client `i % CLIENTS` as the layer names it from credentials,
    /// status 201 with a JSON content type and a body of `BODY_BYTES`.
    fn key_chunk(table: &str, from: u64, to: u64, total: u64) -> String;

    /// The batch claim written by hand on `table`, as guestlist's batches are compared with it
    /// (loaded against empty): the sorted `ids` inserted for `handler` on a transaction of
    /// their own, and how many were new; `None`, doing nothing, where it is not written here.
    fn raw_claim_batch<'a>(
        pool: &'a Pool<Self>,
        table: &'a str,
        handler: &'a str,
        ids: &'a [String],
    ) -> impl Future<Output = anyhow::Result<Option<u64>>> + Send + 'a {
        let _ = (pool, table, handler, ids);
        async { Ok(None) }
    }

    /// Drops `table`'s indexes before a bulk load and returns the SQL that builds them again
    /// as they were; `None`, dropping nothing, where this backend has no such path.
    fn take_indexes_off(
        pool: &Pool<Self>,
        table: &str,
    ) -> impl Future<Output = anyhow::Result<Option<String>>> + Send {
        let _ = (pool, table);
        async { Ok(None) }
    }
}

/// Runs the statement `chunk(from, to)` for the rows `1..=rows`, [`Preload::CHUNK`] at a time,
/// calling `done(to)` after each.
pub(super) async fn in_chunks<DB: Preload>(
    pool: &Pool<DB>,
    rows: u64,
    chunk: impl Fn(u64, u64) -> String,
    mut done: impl FnMut(u64),
) -> sqlx::Result<()> {
    let mut from = 1;
    while from <= rows {
        let to = (from + DB::CHUNK - 1).min(rows);
        DB::exec(pool, chunk(from, to)).await?;
        done(to);
        from = to + 1;
    }
    Ok(())
}

/// The id expression for `shape`, of a backend's three (`CASE i % 3` over them for mixed).
fn id_sql(shape: Shape, [evt, uuid, sha256]: [&str; 3]) -> String {
    match shape {
        Shape::Evt => evt.to_owned(),
        Shape::Uuid => uuid.to_owned(),
        Shape::Sha256 => sha256.to_owned(),
        Shape::Mixed => {
            format!("CASE i % 3 WHEN 0 THEN {evt} WHEN 1 THEN {uuid} ELSE {sha256} END")
        }
    }
}

/// PostgreSQL: a random UUID in text.
const PG_UUID: &str = "gen_random_uuid()::text";

/// PostgreSQL: row `i` of `total`'s time, spread over the week before now, oldest first.
fn pg_spread(total: u64) -> String {
    format!("now() - interval '7 days' + interval '7 days' * i / {total}")
}

impl Preload for guestlist::sqlx::Postgres {
    const CHUNK: u64 = 1_000_000;
    const ANALYZE: &'static str = "ANALYZE";
    const SETTLE: &'static str = "CHECKPOINT";

    // The statement guestlist's batch claim runs, with its begin and commit.
    async fn raw_claim_batch<'a>(
        pool: &'a Pool<Self>,
        table: &'a str,
        handler: &'a str,
        ids: &'a [String],
    ) -> anyhow::Result<Option<u64>> {
        let mut tx = pool.begin().await?;
        let fresh: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table} (handler, message_id) SELECT $1, id FROM unnest($2::text[]) \
             AS batch(id) ON CONFLICT DO NOTHING RETURNING message_id"
        )))
        .bind(handler)
        .bind(ids)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(fresh.len() as u64))
    }

    fn chunk(table: &str, shape: Shape, from: u64, to: u64, total: u64) -> String {
        const EVT: &str = "'evt_' || left(translate(encode(uuid_send(gen_random_uuid()), \
                           'base64'), '+/', 'xy'), 22)";
        const SHA256: &str = "'sha256:' || encode(sha256(uuid_send(gen_random_uuid())), 'hex')";
        let id = id_sql(shape, [EVT, PG_UUID, SHA256]);
        format!(
            "INSERT INTO {table} (handler, message_id, seen_at) \
             SELECT 'warehouse', {id}, {} \
             FROM generate_series({from}, {to}) AS s(i) ON CONFLICT DO NOTHING",
            pg_spread(total)
        )
    }

    fn key_chunk(table: &str, from: u64, to: u64, total: u64) -> String {
        format!(
            "INSERT INTO {table} (scope, idempotency_key, fingerprint, status, headers, body, \
             token, created_at) \
             SELECT 'cred:' || encode(sha256(int8send(i % {CLIENTS})), 'hex'), \
             {PG_UUID}, sha256(int8send(i)), 201, \
             convert_to(E'content-type: application/json\\r\\n', 'UTF8'), \
             convert_to(repeat('x', {BODY_BYTES}), 'UTF8'), i, {} \
             FROM generate_series({from}, {to}) AS s(i) ON CONFLICT DO NOTHING",
            pg_spread(total)
        )
    }

    /// Each index as the catalog defines it (fill factor and collation included), the primary
    /// key put back as the constraint it was; built with a gigabyte to sort in.
    async fn take_indexes_off(pool: &Pool<Self>, table: &str) -> anyhow::Result<Option<String>> {
        let indexes: Vec<IndexRow> = sqlx::query_as(
            "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid), c.conname::text \
             FROM pg_index i LEFT JOIN pg_constraint c \
             ON c.conindid = i.indexrelid AND c.contype = 'p' \
             WHERE i.indrelid = $1::regclass",
        )
        .bind(table)
        .fetch_all(pool)
        .await?;
        let (mut off, mut on) = (
            String::new(),
            String::from("SET maintenance_work_mem = '1GB';"),
        );
        for IndexRow {
            index,
            definition,
            constraint,
        } in indexes
        {
            on.push_str(&format!(" {definition};"));
            match constraint {
                Some(name) => {
                    off.push_str(&format!(" ALTER TABLE {table} DROP CONSTRAINT {name};"));
                    on.push_str(&format!(
                        " ALTER TABLE {table} ADD CONSTRAINT {name} PRIMARY KEY USING INDEX {index};"
                    ));
                }
                None => off.push_str(&format!(" DROP INDEX {index};")),
            }
        }
        Self::exec(pool, off).await?;
        Ok(Some(on))
    }
}

/// An index of a table as PostgreSQL's catalog defines it.
struct IndexRow {
    index: String,
    definition: String,
    /// The primary key's constraint, where the index is one's.
    constraint: Option<String>,
}

impl sqlx::FromRow<'_, sqlx::postgres::PgRow> for IndexRow {
    fn from_row(row: &sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
        use sqlx::Row as _;
        Ok(Self {
            index: row.try_get(0)?,
            definition: row.try_get(1)?,
            constraint: row.try_get(2)?,
        })
    }
}

/// SQLite: a random UUID-shaped text (random hex: SQLite has no UUID function).
const SQLITE_UUID: &str = "lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-' || \
                           hex(randomblob(2)) || '-' || hex(randomblob(2)) || '-' || \
                           hex(randomblob(6)))";

/// SQLite: the numbers `from..=to` as `s(i)`, and row `i` of `total`'s time over the week.
fn sqlite_numbers(from: u64, to: u64, total: u64) -> (String, String) {
    (
        format!(
            "WITH RECURSIVE s(i) AS (SELECT {from} UNION ALL SELECT i + 1 FROM s WHERE i < {to})"
        ),
        format!(
            "strftime('%Y-%m-%d %H:%M:%f', 'now', '-7 days', '+' || (i * 604800.0 / {total}) || ' seconds')"
        ),
    )
}

impl Preload for guestlist::sqlx::Sqlite {
    const CHUNK: u64 = 100_000;
    const ANALYZE: &'static str = "ANALYZE";
    const SETTLE: &'static str = "PRAGMA wal_checkpoint(TRUNCATE)";

    // SQLite has no hash functions: random hex of each shape's length stands in for base62
    // and for digests.
    fn chunk(table: &str, shape: Shape, from: u64, to: u64, total: u64) -> String {
        const EVT: &str = "'evt_' || substr(hex(randomblob(11)), 1, 22)";
        const SHA256: &str = "'sha256:' || lower(hex(randomblob(32)))";
        let id = id_sql(shape, [EVT, SQLITE_UUID, SHA256]);
        let (numbers, spread) = sqlite_numbers(from, to, total);
        format!(
            "{numbers} INSERT OR IGNORE INTO {table} (handler, message_id, seen_at) \
             SELECT 'warehouse', {id}, {spread} FROM s"
        )
    }

    fn key_chunk(table: &str, from: u64, to: u64, total: u64) -> String {
        let (numbers, spread) = sqlite_numbers(from, to, total);
        // The client's number, zero-padded, stands in for the hex digest of its credentials.
        format!(
            "{numbers} INSERT OR IGNORE INTO {table} (scope, idempotency_key, fingerprint, status, \
             headers, body, token, created_at) \
             SELECT printf('cred:%064d', i % {CLIENTS}), {SQLITE_UUID}, randomblob(32), 201, \
             CAST('content-type: application/json' || char(13, 10) AS BLOB), \
             CAST(printf('%.{BODY_BYTES}c', 'x') AS BLOB), i, {spread} FROM s"
        )
    }
}

/// MySQL: a UUID cut from the row's random MD5 `h`.
const MYSQL_UUID: &str = "CONCAT_WS('-', SUBSTR(h, 1, 8), SUBSTR(h, 9, 4), SUBSTR(h, 13, 4), \
                          SUBSTR(h, 17, 4), SUBSTR(h, 21, 12))";

/// MySQL: the numbers `from..=to` as rows `(i, h)`, `h` a random MD5 each, and row `i` of
/// `total`'s time over the week.
fn mysql_numbers(from: u64, to: u64, total: u64) -> (String, String) {
    (
        format!(
            "(SELECT n.i, MD5(CONCAT(RAND(), '-', n.i)) AS h FROM \
             (SELECT {from} + a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS i \
             FROM bench_digits a, bench_digits b, bench_digits c, bench_digits e, bench_digits f) n \
             WHERE n.i <= {to}) g"
        ),
        format!(
            "UTC_TIMESTAMP(6) - INTERVAL 7 DAY + INTERVAL (i * 604800000000 DIV {total}) MICROSECOND"
        ),
    )
}

impl Preload for guestlist::sqlx::MySql {
    const CHUNK: u64 = 100_000;
    const ANALYZE: &'static str = "ANALYZE TABLE";
    const SETTLE: &'static str = "FLUSH TABLES";
    const PREPARE: &'static [&'static str] = &[
        "CREATE TABLE IF NOT EXISTS bench_digits (d INT NOT NULL PRIMARY KEY)",
        "INSERT IGNORE INTO bench_digits VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)",
    ];

    // Five digits make a chunk of 100,000 numbers; `h` is one random MD5 per row, which the
    // shapes cut up (MariaDB before 10.10 has no RANDOM_BYTES).
    fn chunk(table: &str, shape: Shape, from: u64, to: u64, total: u64) -> String {
        const EVT: &str = "CONCAT('evt_', LEFT(REPLACE(REPLACE(TO_BASE64(UNHEX(h)), '+', 'x'), \
                           '/', 'y'), 22))";
        const SHA256: &str = "CONCAT('sha256:', SHA2(CONCAT(h, i), 256))";
        let id = id_sql(shape, [EVT, MYSQL_UUID, SHA256]);
        let (numbers, spread) = mysql_numbers(from, to, total);
        format!(
            "INSERT IGNORE INTO {table} (handler, message_id, seen_at) \
             SELECT 'warehouse', {id}, {spread} FROM {numbers} ORDER BY i"
        )
    }

    fn key_chunk(table: &str, from: u64, to: u64, total: u64) -> String {
        let (numbers, spread) = mysql_numbers(from, to, total);
        format!(
            "INSERT IGNORE INTO {table} (scope, idempotency_key, fingerprint, status, headers, \
             body, token, created_at) \
             SELECT CONCAT('cred:', SHA2(i % {CLIENTS}, 256)), {MYSQL_UUID}, \
             UNHEX(SHA2(CONCAT(h, i), 256)), 201, \
             CONCAT('content-type: application/json', CHAR(13), CHAR(10)), \
             REPEAT('x', {BODY_BYTES}), i, {spread} FROM {numbers} ORDER BY i"
        )
    }
}
