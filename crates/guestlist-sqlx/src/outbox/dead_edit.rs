//! An outgoing dead letter changed before it goes back: its body replaced, headers set or
//! removed, for the message a broker will never take as it is (a header it cannot carry, a body
//! over its limit, a field a consumer refuses). The message goes back marked as edited, by whom.

use guestlist_core::header_lines;

use crate::Error;
use crate::backend::Backend;
use crate::outbox::Outbox;

/// The header an edited message carries: who edited it.
pub const EDITED_HEADER: &str = "guestlist-edited-by";

/// What to change in an outgoing dead letter before it goes back ([`Outbox::retry_dead_edited`]).
///
/// ```
/// use guestlist_sqlx::DeadEdit;
/// let edit = DeadEdit::by("alice")
///     .body(br#"{"order":42,"currency":"EUR"}"#.to_vec())
///     .header("content-type", "application/json")
///     .without_header("x-debug");
/// # let _ = edit;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadEdit {
    by: String,
    body: Option<Vec<u8>>,
    set: Vec<(String, String)>,
    remove: Vec<String>,
}

/// The header a message keeps or loses, and its value.
type Header = (String, Vec<u8>);

impl DeadEdit {
    /// An edit by `who` (an operator's name, a console session's), which changes nothing yet.
    pub fn by(who: impl Into<String>) -> Self {
        Self {
            by: who.into(),
            body: None,
            set: Vec::new(),
            remove: Vec::new(),
        }
    }

    /// Replaces the body.
    pub fn body(mut self, body: Vec<u8>) -> Self {
        self.body = Some(body);
        self
    }

    /// Sets the header `name` to `value`, in place of any it had (names compare without case).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.set.push((name.into(), value.into()));
        self
    }

    /// Removes the header `name` (names compare without case).
    pub fn without_header(mut self, name: impl Into<String>) -> Self {
        self.remove.push(name.into());
        self
    }

    /// The headers (as stored) and body after the edit, marked with who edited them.
    pub(crate) fn apply(&self, stored: Option<&[u8]>, payload: Vec<u8>) -> (Vec<u8>, Vec<u8>) {
        let gone = |name: &str| {
            name.eq_ignore_ascii_case(EDITED_HEADER)
                || self.remove.iter().any(|r| r.eq_ignore_ascii_case(name))
                || self.set.iter().any(|(s, _)| s.eq_ignore_ascii_case(name))
        };
        let mut headers: Vec<Header> = header_lines::decode(stored.unwrap_or_default())
            .into_iter()
            .filter(|(name, _)| !gone(name))
            .collect();
        headers.extend(
            self.set
                .iter()
                .map(|(name, value)| (name.clone(), value.clone().into_bytes())),
        );
        headers.push((EDITED_HEADER.to_owned(), self.by.clone().into_bytes()));
        let encoded = header_lines::encode(headers.iter().map(|(n, v)| (n.as_str(), v)));
        (encoded, self.body.clone().unwrap_or(payload))
    }
}

impl<DB: Backend> Outbox<DB> {
    /// The headers and body of the outgoing dead letter `id`, to look at before an edit.
    pub async fn dead_letter_message(
        &self,
        pool: &sqlx::Pool<DB>,
        id: i64,
    ) -> Result<Option<(Vec<(String, String)>, Vec<u8>)>, Error> {
        let mut conn = pool.acquire().await?;
        let read = DB::dead_read(&mut conn, &self.relay, id)
            .await
            .map_err(|err| self.dead_error(err))?;
        Ok(read.map(|(headers, payload)| {
            let headers = guestlist_core::OutboxMessage::decode_headers(headers.as_deref());
            (headers, payload)
        }))
    }

    /// Changes the outgoing dead letter `id` by `edit` (marked [`EDITED_HEADER`]: who), then
    /// puts it back in the outbox as [`Outbox::retry_dead`] does, on one transaction: `false`
    /// when there is no such dead letter.
    pub async fn retry_dead_edited(
        &self,
        pool: &sqlx::Pool<DB>,
        id: i64,
        edit: &DeadEdit,
    ) -> Result<bool, Error> {
        let mut conn = pool.acquire().await?;
        let apply = |headers: Option<&[u8]>, payload: Vec<u8>| edit.apply(headers, payload);
        DB::dead_retry_edited(&mut conn, &self.relay, id, &apply)
            .await
            .map_err(|err| self.dead_error(err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_sets_removes_replaces_and_marks_who_edited() {
        let stored = header_lines::encode([
            ("content-type", b"text/plain".as_slice()),
            ("x-debug", b"1"),
            ("Trace-Id", b"t-1"),
            (EDITED_HEADER, b"bob"),
        ]);
        let edit = DeadEdit::by("alice")
            .body(b"new".to_vec())
            .header("Content-Type", "application/json")
            .without_header("X-DEBUG");
        let (headers, body) = edit.apply(Some(&stored), b"old".to_vec());
        assert_eq!(body, b"new");
        let headers: Vec<(String, Vec<u8>)> = header_lines::decode(&headers);
        let shown: Vec<(&str, &[u8])> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_slice()))
            .collect();
        assert_eq!(
            shown,
            [
                ("Trace-Id", b"t-1".as_slice()),
                ("Content-Type", b"application/json"),
                (EDITED_HEADER, b"alice"),
            ]
        );
        let (_, kept) = DeadEdit::by("carol").apply(None, b"old".to_vec());
        assert_eq!(kept, b"old", "no new body: the old one stays");
    }
}
