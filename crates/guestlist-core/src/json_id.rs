//! An id read from a JSON document at a JSON Pointer: the one reader behind a consumer's
//! `IdFrom::JsonField` and the HTTP layer's `KeySource::JsonPointer`, so that both take the same
//! values.

/// What a JSON document holds at a pointer, as an id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JsonId {
    /// A string, or an integer written out in decimal.
    Found(String),
    /// Nothing, or `null`, is there.
    Absent,
    /// The document is not JSON; serde_json's words.
    NotJson(String),
    /// Something that is no id is there: named by its kind ("a boolean", "a fractional
    /// number", "an array", "an object"), never echoed, since it may be a megabyte of JSON.
    NotAnId(&'static str),
}

/// Reads the value at `pointer` (RFC 6901, `/event/id`) in `document`.
///
/// ```
/// use guestlist_core::json_id::{JsonId, read};
/// assert_eq!(read(br#"{"id":"evt_1"}"#, "/id"), JsonId::Found("evt_1".into()));
/// assert_eq!(read(br#"{"id":42}"#, "/id"), JsonId::Found("42".into()));
/// assert_eq!(read(br#"{"id":4.2}"#, "/id"), JsonId::NotAnId("a fractional number"));
/// assert_eq!(read(br#"{}"#, "/id"), JsonId::Absent);
/// ```
pub fn read(document: &[u8], pointer: &str) -> JsonId {
    let value: serde_json::Value = match serde_json::from_slice(document) {
        Ok(value) => value,
        Err(err) => return JsonId::NotJson(err.to_string()),
    };
    match value.pointer(pointer) {
        None | Some(serde_json::Value::Null) => JsonId::Absent,
        Some(serde_json::Value::String(text)) => JsonId::Found(text.clone()),
        Some(serde_json::Value::Number(number)) if number.is_i64() || number.is_u64() => {
            JsonId::Found(number.to_string())
        }
        Some(serde_json::Value::Number(_)) => JsonId::NotAnId("a fractional number"),
        Some(serde_json::Value::Bool(_)) => JsonId::NotAnId("a boolean"),
        Some(serde_json::Value::Array(_)) => JsonId::NotAnId("an array"),
        Some(serde_json::Value::Object(_)) => JsonId::NotAnId("an object"),
    }
}
