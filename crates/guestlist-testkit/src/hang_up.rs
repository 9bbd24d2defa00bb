//! The points at which a client hangs up on a keyed request, shared by the HTTP layer's and the
//! gateway's stories: each point's commit held open on PostgreSQL ([`HeldCommit`]) so that the
//! hang-up lands inside its window every time, and how much of the body the client sends.

use std::time::Duration;

use crate::held_commit::{Change, HeldCommit};

/// Where in a keyed request the client hangs up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HangUp {
    /// Halfway through sending the body: nothing may be claimed or run.
    BeforeTheClaim,
    /// While the claim's commit is in flight.
    DuringTheClaimCommit,
    /// While the request's work runs (the handler, or the gateway's upstream).
    DuringTheWork,
    /// While the stored answer's commit is in flight.
    DuringTheAnswerCommit,
}

/// How long the server has to notice a hang-up before the test lets the request go on: ample
/// for a closed loopback socket, and the story fails (409 for the whole lease) if the server
/// dropped the request's work when it noticed.
pub const NOTICE: Duration = Duration::from_millis(400);

/// The retry's deadline: well inside a 30 s lease, so a stranded key cannot pass for a slow one.
pub const RETRY_FOR: Duration = Duration::from_secs(10);

impl HangUp {
    /// Holds open the commit this point hangs up in, on the key table `table` of the PostgreSQL
    /// at `url`: the claim's insert, or the answer's update; `None` for the other points.
    pub async fn hold_commit(self, url: &str, table: &str) -> Option<HeldCommit> {
        let change = match self {
            Self::DuringTheClaimCommit => Change::Insert,
            Self::DuringTheAnswerCommit => Change::Update("NEW.status IS NOT NULL"),
            Self::BeforeTheClaim | Self::DuringTheWork => return None,
        };
        Some(HeldCommit::on(url, table, change).await)
    }

    /// How many bytes of `body` the client sends before it hangs up: half before the claim, all
    /// of it otherwise.
    pub fn sent(self, body: &[u8]) -> usize {
        match self {
            Self::BeforeTheClaim => body.len() / 2,
            _ => body.len(),
        }
    }
}
