//! Where a message's id comes from.

use guestlist_core::MessageId;

use crate::Delivery;

/// How the consumer finds a message's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdFrom {
    /// The broker's own id: `Nats-Msg-Id` on JetStream, `message_id` on AMQP.
    BrokerId,
    /// A header of the message.
    Header(String),
    /// A string (or number) field of a JSON payload, by JSON pointer (`/event/id`).
    JsonField(String),
    /// The SHA-256 of the raw payload bytes, for publishers that send no id.
    PayloadSha256,
}

impl IdFrom {
    /// The id of `delivery`, or why there is none.
    pub(crate) fn id_of(&self, delivery: &impl Delivery) -> Result<MessageId, String> {
        let raw = match self {
            IdFrom::BrokerId => delivery
                .broker_id()
                .ok_or("the message has no broker id (publish it with one, or derive the id another way)")?
                .to_owned(),
            IdFrom::Header(name) => delivery
                .header(name)
                .ok_or_else(|| format!("the message has no {name} header"))?
                .to_owned(),
            IdFrom::JsonField(pointer) => {
                let json: serde_json::Value = serde_json::from_slice(delivery.payload())
                    .map_err(|err| format!("the payload is not JSON ({err}), so it has no {pointer}"))?;
                match json.pointer(pointer) {
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(serde_json::Value::Number(n)) => n.to_string(),
                    _ => return Err(format!("the payload has no string or number at {pointer}")),
                }
            }
            IdFrom::PayloadSha256 => return Ok(MessageId::from_raw_bytes(delivery.payload())),
        };
        MessageId::new(raw).map_err(|err| err.to_string())
    }
}
