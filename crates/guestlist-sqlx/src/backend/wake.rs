//! What wakes an idle relay: a commit's notification where the database sends one, a poll
//! interval everywhere.

use std::time::Duration;

/// Wakes an idle relay when messages commit (PostgreSQL's `LISTEN`), or after the poll
/// interval.
#[derive(Debug)]
#[allow(unreachable_pub)] // named by the sealed traits, unreachable outside the crate
pub struct Wake {
    #[cfg(feature = "postgres")]
    listener: Option<sqlx::postgres::PgListener>,
}

impl Wake {
    /// Wakes after the poll interval only.
    pub(crate) fn polling() -> Self {
        Self {
            #[cfg(feature = "postgres")]
            listener: None,
        }
    }

    /// Wakes on `listener`'s notifications too.
    #[cfg(feature = "postgres")]
    pub(crate) fn listening(listener: sqlx::postgres::PgListener) -> Self {
        Self {
            listener: Some(listener),
        }
    }

    /// Whether commits wake the relay, or only the poll interval.
    pub(crate) fn listens(&self) -> bool {
        #[cfg(feature = "postgres")]
        return self.listener.is_some();
        #[cfg(not(feature = "postgres"))]
        false
    }

    /// The next notification's payload; `None` where nothing notifies. An error is a lost
    /// connection: the next call opens it again (and the notifications meanwhile are lost).
    pub(crate) async fn next(&mut self) -> Option<Result<String, sqlx::Error>> {
        #[cfg(feature = "postgres")]
        if let Some(listener) = &mut self.listener {
            return Some(listener.recv().await.map(|n| n.payload().to_owned()));
        }
        None
    }

    /// Waits for a commit's notification or `poll`, whichever comes first.
    pub(crate) async fn wait(&mut self, poll: Duration) {
        #[cfg(feature = "postgres")]
        if let Some(listener) = &mut self.listener {
            tokio::select! {
                got = listener.recv() => {
                    if let Err(err) = got {
                        // Reconnected on the next call; meanwhile the poll keeps the relay going.
                        tracing::warn!(error = %err, "outbox relay lost its LISTEN connection");
                        tokio::time::sleep(poll).await;
                    }
                    // One round reads every message these notifications announced.
                    while listener.next_buffered().is_some() {}
                }
                () = tokio::time::sleep(poll) => {}
            }
            return;
        }
        tokio::time::sleep(poll).await;
    }
}
