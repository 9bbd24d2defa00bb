//! What a handler sees of a message.

use guestlist_core::MessageId;

/// A message handed to the handler: the id the inbox claimed, and the payload as received.
#[derive(Debug, Clone)]
pub struct Message {
    /// The id the inbox claimed.
    pub id: MessageId,
    /// The payload, exactly as received.
    pub payload: Vec<u8>,
    /// How many times it has been delivered, this time included.
    pub delivery_count: u32,
}
