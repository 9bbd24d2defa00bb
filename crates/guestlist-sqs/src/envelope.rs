//! SNS's JSON envelope: what a queue subscribed to a topic without raw message delivery
//! receives.

use std::collections::HashMap;

/// A notification unwrapped from the body received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Envelope {
    /// SNS's id of the publish: the same in every copy SNS delivers of it.
    pub(crate) message_id: String,
    /// The notification's `Message`, as the publisher gave it to SNS.
    pub(crate) payload: Vec<u8>,
    /// SNS's message attributes, by name.
    pub(crate) attributes: HashMap<String, String>,
}

impl Envelope {
    /// The notification in `body`, read from the bytes received; `None` when `body` is not an
    /// SNS notification (a message sent to the queue directly, or with raw delivery on).
    pub(crate) fn unwrap(body: &[u8]) -> Option<Self> {
        let envelope: serde_json::Value = serde_json::from_slice(body).ok()?;
        if envelope.get("Type")?.as_str()? != "Notification" {
            return None;
        }
        envelope.get("TopicArn")?.as_str()?;
        let message_id = envelope.get("MessageId")?.as_str()?.to_owned();
        // A JSON string decodes to exactly the text it encodes: these are the publisher's bytes.
        let payload = envelope.get("Message")?.as_str()?.as_bytes().to_vec();
        let attributes = envelope
            .get("MessageAttributes")
            .and_then(serde_json::Value::as_object)
            .map(|attributes| {
                attributes
                    .iter()
                    .filter_map(|(name, attribute)| {
                        let value = attribute.get("Value")?.as_str()?;
                        Some((name.clone(), value.to_owned()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(Self {
            message_id,
            payload,
            attributes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Envelope;

    #[test]
    fn a_notification_gives_the_publishers_bytes_and_snss_id() {
        let publisher = "{\"id\": \"evt_1\",\t\"note\": \"caf\u{e9} \\\"quoted\\\"\"}";
        let body = serde_json::json!({
            "Type": "Notification",
            "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
            "TopicArn": "arn:aws:sns:us-east-1:123456789012:orders",
            "Message": publisher,
            "Timestamp": "2026-12-01T00:00:00.000Z",
            "MessageAttributes": {"event-id": {"Type": "String", "Value": "evt_1"}}
        })
        .to_string();
        let envelope = Envelope::unwrap(body.as_bytes()).expect("a notification");
        assert_eq!(envelope.payload, publisher.as_bytes(), "byte for byte");
        assert_eq!(envelope.message_id, "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324");
        assert_eq!(envelope.attributes["event-id"], "evt_1");
    }

    #[test]
    fn anything_else_is_not_unwrapped() {
        for body in [
            r#"{"id":"evt_1"}"#,
            r#"{"Type":"SubscriptionConfirmation","MessageId":"m","TopicArn":"t","Message":"x"}"#,
            r#"{"Type":"Notification","MessageId":"m","Message":"x"}"#,
            "not json",
        ] {
            assert_eq!(Envelope::unwrap(body.as_bytes()), None, "{body}");
        }
    }
}
