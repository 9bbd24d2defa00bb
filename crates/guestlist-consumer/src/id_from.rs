//! Where a message's id comes from.

use guestlist_core::MessageId;
use guestlist_core::json_id::{self, JsonId};

use crate::Delivery;

/// How the consumer finds a message's id.
///
/// Publishers put ids in different places: a field of the event, a header, the broker's own
/// message id. [`IdFrom::first_of`] accepts several, so that a consumer can be fed by this
/// project's publishers and by ordinary clients in other languages alike.
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
    /// The first of these places that the message has, tried in order; see
    /// [`IdFrom::first_of`].
    FirstOf(Vec<IdFrom>),
}

/// Why a place gave no id.
enum Miss {
    /// The message has nothing there: the next place may have it.
    Absent(String),
    /// The message has something there, but not a valid id.
    Invalid(String),
}

impl Miss {
    fn into_reason(self) -> String {
        match self {
            Miss::Absent(why) | Miss::Invalid(why) => why,
        }
    }
}

impl IdFrom {
    /// The id from the first of `places` that the message has, tried in order.
    ///
    /// A place the message lacks (no such JSON field, no broker id, no such header) passes to
    /// the next. A place the message has, but whose value is no valid id (an empty string, 300
    /// bytes), is an error, not a reason to look further: the publisher's bug is reported, and
    /// two copies of one event can never be claimed under two different ids. Put
    /// [`IdFrom::PayloadSha256`] last, if at all: every message has it.
    ///
    /// ```
    /// use guestlist_consumer::IdFrom;
    ///
    /// // The event's own `id`, or else the id the publisher gave the broker (AMQP `message_id`,
    /// // `Nats-Msg-Id`).
    /// let id_from = IdFrom::first_of([IdFrom::JsonField("/id".into()), IdFrom::BrokerId]);
    /// # let _ = id_from;
    /// ```
    pub fn first_of(places: impl IntoIterator<Item = IdFrom>) -> Self {
        IdFrom::FirstOf(places.into_iter().collect())
    }

    /// The id of `delivery`, or why there is none.
    pub(crate) fn id_of(&self, delivery: &impl Labelled) -> Result<MessageId, String> {
        self.find(delivery).map_err(Miss::into_reason)
    }

    fn find(&self, delivery: &impl Labelled) -> Result<MessageId, Miss> {
        let raw = match self {
            IdFrom::BrokerId => delivery
                .broker_id()
                .ok_or_else(|| Miss::Absent("the message has no broker id (publish it with one, or derive the id another way)".to_owned()))?
                .to_owned(),
            IdFrom::Header(name) => delivery
                .header(name)
                .ok_or_else(|| Miss::Absent(format!("the message has no {name} header")))?
                .to_owned(),
            IdFrom::JsonField(pointer) => match json_id::read(delivery.payload(), pointer) {
                JsonId::Found(text) => text,
                JsonId::NotJson(err) => {
                    return Err(Miss::Absent(format!("the payload is not JSON ({err}), so it has no {pointer}")));
                }
                JsonId::NotAnId(kind) => {
                    return Err(Miss::Invalid(format!("the payload's {pointer} is {kind}, not a string or an integer")));
                }
                _ => {
                    return Err(Miss::Absent(format!("the payload has no string or integer at {pointer}")));
                }
            },
            IdFrom::PayloadSha256 => return Ok(MessageId::from_raw_bytes(delivery.payload())),
            IdFrom::FirstOf(places) => return first_found(places, delivery),
        };
        MessageId::new(raw).map_err(|err| Miss::Invalid(err.to_string()))
    }
}

fn first_found(places: &[IdFrom], delivery: &impl Labelled) -> Result<MessageId, Miss> {
    let mut absent = Vec::with_capacity(places.len());
    for place in places {
        match place.find(delivery) {
            Ok(id) => return Ok(id),
            Err(Miss::Absent(why)) => absent.push(why),
            Err(invalid) => return Err(invalid),
        }
    }
    if absent.is_empty() {
        return Err(Miss::Absent(
            "IdFrom::FirstOf names no place to read the id from".to_owned(),
        ));
    }
    Err(Miss::Absent(absent.join("; ")))
}

/// The parts of a delivery an id can be read from.
pub(crate) trait Labelled {
    fn payload(&self) -> &[u8];
    fn header(&self, name: &str) -> Option<&str>;
    fn broker_id(&self) -> Option<&str>;
}

impl<D: Delivery> Labelled for D {
    fn payload(&self) -> &[u8] {
        Delivery::payload(self)
    }

    fn header(&self, name: &str) -> Option<&str> {
        Delivery::header(self, name)
    }

    fn broker_id(&self) -> Option<&str> {
        Delivery::broker_id(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message as a publisher left it: a payload, headers, maybe a broker id.
    #[derive(Default)]
    struct Sent {
        payload: &'static [u8],
        headers: Vec<(&'static str, &'static str)>,
        broker_id: Option<&'static str>,
    }

    impl Labelled for Sent {
        fn payload(&self) -> &[u8] {
            self.payload
        }

        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| *v)
        }

        fn broker_id(&self) -> Option<&str> {
            self.broker_id
        }
    }

    fn json_then_broker() -> IdFrom {
        IdFrom::first_of([IdFrom::JsonField("/id".into()), IdFrom::BrokerId])
    }

    fn id(raw: &str) -> MessageId {
        MessageId::new(raw).unwrap()
    }

    #[test]
    fn the_events_own_id_comes_first() {
        let both = Sent {
            payload: br#"{"id": "evt_9f3k", "order": 1}"#,
            broker_id: Some("amqp-42"),
            ..Sent::default()
        };
        assert_eq!(json_then_broker().id_of(&both), Ok(id("evt_9f3k")));
    }

    #[test]
    fn an_ordinary_clients_message_id_stands_in_for_a_missing_field() {
        let pika = Sent {
            payload: br#"{"order": 1, "amount": 1200}"#,
            broker_id: Some("evt_from_python"),
            ..Sent::default()
        };
        assert_eq!(json_then_broker().id_of(&pika), Ok(id("evt_from_python")));
        let null_id = Sent {
            payload: br#"{"id": null, "order": 1}"#,
            broker_id: Some("evt_from_python"),
            ..Sent::default()
        };
        assert_eq!(
            json_then_broker().id_of(&null_id),
            Ok(id("evt_from_python"))
        );
    }

    #[test]
    fn a_payload_that_is_not_json_falls_through_to_the_next_place() {
        let text = Sent {
            payload: b"order 1 paid",
            headers: vec![("X-Event-Id", "evt_text")],
            ..Sent::default()
        };
        let id_from = IdFrom::first_of([
            IdFrom::JsonField("/id".into()),
            IdFrom::BrokerId,
            IdFrom::Header("X-Event-Id".into()),
        ]);
        assert_eq!(id_from.id_of(&text), Ok(id("evt_text")));
    }

    #[test]
    fn a_place_that_holds_a_bad_id_is_an_error_not_a_fall_through() {
        let empty = Sent {
            payload: br#"{"id": "", "order": 1}"#,
            broker_id: Some("evt_9f3k"),
            ..Sent::default()
        };
        let err = json_then_broker().id_of(&empty).unwrap_err();
        assert!(!err.contains("broker id"), "{err}");
        let object = Sent {
            payload: br#"{"id": {"value": "evt_9f3k"}}"#,
            broker_id: Some("evt_9f3k"),
            ..Sent::default()
        };
        let err = json_then_broker().id_of(&object).unwrap_err();
        assert!(
            err.contains("is an object, not a string or an integer"),
            "{err}"
        );
        // The HTTP layer's key reader takes the same values: integers, not fractions.
        let fraction = Sent {
            payload: br#"{"id": 4.2}"#,
            broker_id: Some("evt_9f3k"),
            ..Sent::default()
        };
        let err = json_then_broker().id_of(&fraction).unwrap_err();
        assert!(err.contains("is a fractional number"), "{err}");
    }

    #[test]
    fn no_place_has_an_id_and_the_error_names_each() {
        let bare = Sent {
            payload: br#"{"order": 1}"#,
            ..Sent::default()
        };
        let err = json_then_broker().id_of(&bare).unwrap_err();
        assert!(err.contains("no string or integer at /id"), "{err}");
        assert!(err.contains("no broker id"), "{err}");
        assert!(IdFrom::first_of([]).id_of(&bare).is_err());
    }

    #[test]
    fn the_payloads_hash_is_the_last_resort() {
        let bare = Sent {
            payload: br#"{"order": 1}"#,
            ..Sent::default()
        };
        let id_from = IdFrom::first_of([IdFrom::BrokerId, IdFrom::PayloadSha256]);
        assert_eq!(
            id_from.id_of(&bare),
            Ok(MessageId::from_raw_bytes(bare.payload))
        );
    }

    #[test]
    fn single_places_read_as_before() {
        let sent = Sent {
            payload: br#"{"event": {"id": 42}}"#,
            headers: vec![("Event-Id", "evt_h")],
            broker_id: Some("evt_b"),
        };
        assert_eq!(
            IdFrom::JsonField("/event/id".into()).id_of(&sent),
            Ok(id("42"))
        );
        assert_eq!(
            IdFrom::Header("Event-Id".into()).id_of(&sent),
            Ok(id("evt_h"))
        );
        assert_eq!(IdFrom::BrokerId.id_of(&sent), Ok(id("evt_b")));
        assert!(IdFrom::Header("Other".into()).id_of(&sent).is_err());
    }
}
