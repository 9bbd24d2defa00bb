//! Where a message's ordering key comes from.

use guestlist_core::json_id::{self, JsonId};

use crate::Delivery;

/// Where the consumer finds a message's ordering key: messages of one key run one after
/// another, in the order the broker gave them; messages of different keys may run at once, up
/// to [`Consumer::concurrency`](crate::Consumer::concurrency).
///
/// A message that has no key where `KeyFrom` looks shares one key with every other such message:
/// keyless messages keep the broker's order among themselves, as a consumer with no keys at all
/// runs them.
///
/// ```
/// use guestlist_consumer::KeyFrom;
///
/// // Events of one order in their order, different orders at once.
/// let keys = KeyFrom::Header("order-id".into());
/// // On `orders.<region>.<order>` subjects: the order, the third token.
/// let by_subject = KeyFrom::SubjectToken(2);
/// # let _ = (keys, by_subject);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum KeyFrom {
    /// The broker's own key: a Kafka record's key, an SQS FIFO message's group. NATS and RabbitMQ
    /// have none: their messages then keep the broker's order, one at a time.
    #[default]
    Broker,
    /// A header of the message (a NATS or RabbitMQ header, a Kafka record header, an SQS message
    /// attribute).
    Header(String),
    /// A string (or integer) field of a JSON payload, by JSON pointer (`/order/id`), read as
    /// [`IdFrom::JsonField`](crate::IdFrom::JsonField) reads an id; a payload that is not JSON,
    /// or holds no such field, has no key.
    JsonField(String),
    /// A token of the subject (NATS) or routing key (RabbitMQ) the message was published to,
    /// split on dots and counted from 0: `SubjectToken(2)` of `orders.eu.42` is `42`.
    SubjectToken(usize),
    /// Every message is its own key: no order between any two messages, all of them at once up
    /// to the concurrency.
    Unordered,
}

/// A message's place in the consumer's order: by key, or on its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum OrderKey {
    /// In order with the other messages of this key (`None`: the keyless ones).
    Key(Option<String>),
    /// In no order with any other message: the delivery's place in its batch.
    Alone(usize),
}

impl OrderKey {
    /// The key a message that goes back holds for the later ones of its key: none for a
    /// message on its own, nor for the keyless ones (they keep going in the broker's order, as
    /// with no keys at all).
    pub(crate) fn held(&self) -> Option<&str> {
        match self {
            OrderKey::Key(Some(key)) => Some(key),
            OrderKey::Key(None) | OrderKey::Alone(_) => None,
        }
    }
}

impl KeyFrom {
    /// The ordering key of `delivery`, the `at`-th of its batch.
    pub(crate) fn key_of<D: Delivery>(&self, delivery: &D, at: usize) -> OrderKey {
        OrderKey::Key(match self {
            KeyFrom::Broker => delivery.key(),
            KeyFrom::Header(name) => delivery.header(name).map(str::to_owned),
            KeyFrom::JsonField(pointer) => match json_id::read(delivery.payload(), pointer) {
                JsonId::Found(key) => Some(key),
                _ => None,
            },
            KeyFrom::SubjectToken(token) => delivery
                .topic()
                .and_then(|topic| topic.split('.').nth(*token).map(str::to_owned)),
            KeyFrom::Unordered => return OrderKey::Alone(at),
        })
    }
}
