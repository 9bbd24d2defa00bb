//! The statements of the outbox's relay, a file per concern, each with its templates (the
//! backends' constants) beside the statements that run them: the lease ([`lease`]), the pending
//! rows ([`pending`]), the stamp and the burial ([`stamp`]), the dead letters ([`dead`]), the
//! figures ([`figures`]), the relays' registry ([`registry`]), a change of the shard count
//! ([`reshard`]); the text formatted for one table is [`RelaySql`] ([`sql`]).

use std::future::Future;

pub(crate) mod dead;
pub(crate) mod figures;
pub(crate) mod lease;
pub(crate) mod pending;
pub(crate) mod registry;
pub(crate) mod reshard;
mod sql;
pub(crate) mod stamp;

pub(crate) use dead::DeadStatements;
pub(crate) use figures::{FigureStatements, ShardRow, shard_count};
pub(crate) use lease::{Held, LeaseStatements};
pub(crate) use pending::{Pending, PendingRow, PendingStatements};
pub(crate) use registry::RegistryStatements;
pub(crate) use reshard::ReshardStatements;
pub(crate) use sql::RelaySql;
pub(crate) use stamp::{Stamp, StampStatements};

use crate::backend::sealed::OutboxStatements;

/// What wakes a relay when messages commit. Sealed: implemented here for the three backends.
#[allow(unreachable_pub)]
pub trait ListenStatements: OutboxStatements {
    /// Something that wakes the relay when messages commit: a `LISTEN` on PostgreSQL, nothing
    /// elsewhere (the relay polls).
    fn listen<'p>(
        pool: &'p sqlx::Pool<Self>,
        channel: &'p str,
    ) -> impl Future<Output = Result<crate::backend::Wake, sqlx::Error>> + Send + 'p {
        let _ = (pool, channel);
        async { Ok(crate::backend::Wake::polling()) }
    }
}

/// The per-database half of the relay: every concern's statements.
#[allow(unreachable_pub)]
pub trait RelayStatements:
    LeaseStatements
    + PendingStatements
    + StampStatements
    + DeadStatements
    + FigureStatements
    + RegistryStatements
    + ReshardStatements
    + ListenStatements
{
}

impl<DB> RelayStatements for DB where
    DB: LeaseStatements
        + PendingStatements
        + StampStatements
        + DeadStatements
        + FigureStatements
        + RegistryStatements
        + ReshardStatements
        + ListenStatements
{
}

/// `ids` as a literal SQL list: plain integers, formatted here, so nothing to escape.
fn id_list(ids: &[i64]) -> String {
    let list = ids.iter().map(i64::to_string).collect::<Vec<_>>();
    format!("({})", list.join(","))
}
