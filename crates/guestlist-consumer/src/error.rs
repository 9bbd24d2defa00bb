//! Why a consumer refused to start, or stopped.

use std::time::Duration;

/// A consumer that refuses to start, or whose store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The broker's ack wait is shorter than a handler may run, and keep-alives are off.
    #[error(
        "the broker redelivers after {ack_wait:?} without an acknowledgement, but handlers may run \
         {handler_timeout:?}: raise the consumer's ack wait (an SQS queue's visibility timeout), lower Consumer::handler_timeout, or \
         keep keep-alives on"
    )]
    AckWaitTooShort {
        /// The broker's ack wait.
        ack_wait: Duration,
        /// The consumer's handler timeout.
        handler_timeout: Duration,
    },
    /// The inbox would forget messages the broker may still redeliver.
    #[error(
        "the inbox keeps rows {retention:?}, but the broker may redeliver a message up to {horizon:?} \
         after its first delivery: keep rows longer (Retention::new), or bound the broker's redeliveries"
    )]
    RetentionShorterThanRedelivery {
        /// The inbox's retention.
        retention: Duration,
        /// The broker's redelivery horizon.
        horizon: Duration,
    },
    /// The inbox's table (or its `<table>_deferrals`) is not there: every message would fail
    /// on it. The text says what to run.
    #[error("the consumer cannot start: {0}")]
    MissingTable(guestlist_sqlx::Error),
    /// The database refused the consumer's first claim for a reason other than an outage (a
    /// permission, a table of another shape).
    #[error("the consumer cannot start: its first claim failed: {0}")]
    Store(guestlist_sqlx::Error),
}
