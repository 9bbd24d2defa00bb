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
