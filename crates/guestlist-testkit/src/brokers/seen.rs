//! A handler that keeps what it saw of each message, for the stories about what a handler sees.

use std::sync::{Arc, Mutex};

use guestlist_consumer::{Handler, Message};
use guestlist_sqlx::Backend;

/// The messages a [`Seen`] handler kept, each with its details.
pub type Kept<T> = Arc<Mutex<Vec<(Message, T)>>>;

/// Keeps each message with what `details` read of the broker's own delivery.
pub struct Seen<T>(pub Kept<T>, pub fn(&Message) -> T);

impl<DB: Backend, T: Send + Sync + 'static> Handler<DB> for Seen<T> {
    type Error = std::convert::Infallible;

    async fn handle(&self, _tx: &mut DB::Connection, message: &Message) -> Result<(), Self::Error> {
        let details = (self.1)(message);
        self.0.lock().unwrap().push((message.clone(), details));
        Ok(())
    }
}

/// Runs a [`Seen`] consumer on `rig`'s broker until it has handled one message and the broker
/// is drained; returns that message with what `details` read of its delivery.
pub async fn first_handled<B, T>(
    rig: &crate::brokers::Rig<B, sqlx::Postgres>,
    details: fn(&Message) -> T,
) -> (Message, T)
where
    B: crate::brokers::Broker,
    T: Clone + Send + Sync + 'static,
{
    let seen: Kept<T> = Arc::default();
    let consumer = guestlist_consumer::Consumer::with_handler(
        rig.broker.source().await,
        rig.db.pool.clone(),
        rig.inbox.clone(),
        guestlist_core::HandlerName::new("warehouse").unwrap(),
        guestlist_consumer::IdFrom::JsonField("/id".to_owned()),
        Seen(seen.clone(), details),
    );
    let (stop, task) = crate::run_until_stopped!(consumer);
    rig.until(
        std::time::Duration::from_secs(60),
        "the message is handled",
        || async { !seen.lock().unwrap().is_empty() && rig.broker.drained().await },
    )
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    seen.lock().unwrap()[0].clone()
}
