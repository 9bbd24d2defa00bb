//! `guestlist history ID`: everything the inbox, the outbox and the key table know of a message
//! id, an idempotency key or a key carried from one, in the order it happened.

use std::time::{Duration, SystemTime};

use clap::Args;
use guestlist::{
    Backend, TableName,
    history::{Found, History, Holder, Seen, Sighting},
};
use serde_json::Value;

use crate::database::{self, DatabaseUrl, with_pool};

#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    /// A message id (`evt_9f3k`), an Idempotency-Key, or a key carried downstream
    /// (`warehouse:evt_9f3k/charge`, which also looks up `evt_9f3k`).
    id: String,
    #[command(flatten)]
    database: DatabaseUrl,
    #[command(flatten)]
    tables: HistoryTables,
    /// One JSON object instead of lines for people.
    #[arg(long)]
    json: bool,
}

/// The tables a history reads (`guestlist history`, the console).
#[derive(Debug, Args)]
pub(crate) struct HistoryTables {
    /// The inbox table.
    #[arg(long, default_value = "guestlist_inbox")]
    pub(crate) inbox_table: String,
    /// The outbox table.
    #[arg(long, default_value = "guestlist_outbox")]
    pub(crate) outbox_table: String,
    /// The key table.
    #[arg(long, default_value = "guestlist_keys")]
    pub(crate) key_table: String,
}

impl HistoryTables {
    /// The inbox, the outbox and the key table, each name checked before it reaches SQL.
    pub(crate) fn names(&self) -> anyhow::Result<(TableName, TableName, TableName)> {
        Ok((
            TableName::new(&self.inbox_table)?,
            TableName::new(&self.outbox_table)?,
            TableName::new(&self.key_table)?,
        ))
    }
}

pub(crate) async fn run(args: HistoryArgs) -> anyhow::Result<()> {
    let tables = args.tables.names()?;
    let pool = database::connect_existing(&args.database, 1).await?;
    let found = with_pool!(pool, |pool| find(&pool, tables.clone(), &args.id).await)?;
    let now = SystemTime::now();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&as_json(&found, now)?)?);
    } else {
        print_found(&found);
    }
    Ok(())
}

/// What the three tables know of `id`.
pub(crate) async fn find<DB: Backend>(
    pool: &guestlist::sqlx::Pool<DB>,
    (inbox, outbox, keys): (TableName, TableName, TableName),
    id: &str,
) -> anyhow::Result<Found> {
    Ok(History::<DB>::with_tables(inbox, outbox, keys)
        .find(pool, id)
        .await?)
}

/// When a sighting happened, to the millisecond.
pub(crate) fn when(sighting: &Sighting) -> String {
    humantime::format_rfc3339_millis(sighting.at).to_string()
}

fn print_found(found: &Found) {
    if !found.carried_from.is_empty() {
        println!(
            "{}: carried from {}",
            found.id,
            found.carried_from.join(", then ")
        );
    }
    if found.sightings.is_empty() {
        println!(
            "{}: no table knows it (never seen here, or purged past the retention)",
            found.id
        );
    }
    for sighting in &found.sightings {
        println!(
            "{}  {:<24} {}",
            when(sighting),
            sighting.table,
            describe(&sighting.seen)
        );
    }
    if !found.missing.is_empty() {
        println!("not in this database: {}", found.missing.join(", "));
    }
}

/// One line for a person.
pub(crate) fn describe(seen: &Seen) -> String {
    match seen {
        Seen::Claimed {
            handler,
            message_id,
        } => format!("{message_id} handled by {handler} (claim committed with its work)"),
        Seen::Deferred {
            handler,
            message_id,
            deferrals,
        } => format!(
            "{message_id} deferred by {handler}, {deferrals} times so far (the first shown)"
        ),
        Seen::GaveUp {
            handler,
            message_id,
            reason,
            deliveries,
        } => format!(
            "{message_id} dead-lettered by {handler} after {deliveries} deliveries (to the \
             broker's dead-letter place): {reason}"
        ),
        Seen::StepDone {
            handler,
            message_id,
            place,
            step,
            result_bytes,
        } => format!(
            "{message_id}: step {place} \"{step}\" of {handler} finished ({result_bytes}-byte \
             result journaled; a redelivery replays it)"
        ),
        Seen::StepsRun {
            handler,
            message_id,
            lease_left_ms,
            steps_done,
        } if *lease_left_ms > 0 => format!(
            "{message_id}: a run of {handler}'s steps holds it, {steps_done} steps done (its \
             lease ends in {})",
            humantime::format_duration(Duration::from_millis(lease_left_ms.unsigned_abs()))
        ),
        Seen::StepsRun {
            handler,
            message_id,
            lease_left_ms,
            steps_done,
        } => format!(
            "{message_id}: {handler}'s run of its steps stopped {} ago, {steps_done} steps done \
             (the next delivery resumes after them; a handled message's kept journal looks \
             the same)",
            humantime::format_duration(Duration::from_millis(
                lease_left_ms.unsigned_abs() / 1000 * 1000
            ))
        ),
        Seen::Enqueued {
            message_id,
            topic,
            ordering_key,
            seq,
            shard,
            relay,
            pending,
        } => {
            let key = ordering_key
                .as_ref()
                .map_or_else(String::new, |key| format!(", key {key} #{seq}"));
            let state = match (pending, relay) {
                (false, _) => "published".to_owned(),
                (true, Some(Holder { relay, token, .. })) => {
                    format!("pending, relay {relay} holds the shard (token {token})")
                }
                (true, None) => "pending, no relay holds the shard".to_owned(),
            };
            format!(
                "{message_id} committed to the outbox for {topic}{key} on shard {shard}: {state}"
            )
        }
        Seen::Published { message_id, relay } => match relay {
            Some(Holder { relay, token, .. }) => format!(
                "{message_id} published (the broker confirmed it) by relay {relay} (token {token})"
            ),
            None => format!("{message_id} published (the broker confirmed it)"),
        },
        Seen::DeadLettered {
            message_id,
            topic,
            reason,
            id,
        } => format!(
            "{message_id} dead-lettered for {topic}: {reason} \
             (guestlist outbox dead retry {id})"
        ),
        Seen::Key {
            scope,
            key,
            state,
            attempt,
        } => format!("key {key} taken in scope {scope}, attempt {attempt}: {state}"),
        other => format!("{other:?}"),
    }
}

/// `found` as JSON (the library's own form), each sighting with its age beside it.
fn as_json(found: &Found, now: SystemTime) -> serde_json::Result<Value> {
    let mut json = serde_json::to_value(found)?;
    if let Some(entries) = json["sightings"].as_array_mut() {
        for (entry, sighting) in entries.iter_mut().zip(&found.sightings) {
            let age = now.duration_since(sighting.at).unwrap_or_default();
            entry["age_ms"] = Value::from(u64::try_from(age.as_millis()).unwrap_or(u64::MAX));
        }
    }
    Ok(json)
}
