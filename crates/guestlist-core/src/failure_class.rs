//! The class of a failure's reason: the reason with what differs from one message to the next
//! (ids, numbers, quoted values) taken out, so that dead letters that failed the same way are
//! counted, retried and dropped together.

use sha2::{Digest, Sha256};

/// `reason` with every quoted value (in any of `'"``) written `'…'`, every word that holds a digit (an id, a
/// number, a duration) written `#`, and runs of white space made one space.
///
/// ```
/// use guestlist_core::failure_class;
/// assert_eq!(
///     failure_class("order 42 not found: no row for 'evt_9f3k' after 1.5s"),
///     "order # not found: no row for '…' after #",
/// );
/// assert_eq!(
///     failure_class("order 7 not found: no row for \"evt_1\" after 30s"),
///     failure_class("order 42 not found: no row for 'evt_9f3k' after 1.5s"),
/// );
/// ```
pub fn failure_class(reason: &str) -> String {
    let mut class = String::with_capacity(reason.len());
    let mut chars = reason.chars().peekable();
    let mut word = String::new();
    let flush = |word: &mut String, class: &mut String| {
        if word.is_empty() {
            return;
        }
        // A sentence's full stop or colon after a number stays.
        let trimmed = word.trim_end_matches(['.', ':']);
        let tail = &word[trimmed.len()..];
        if trimmed.chars().any(|c| c.is_ascii_digit()) {
            class.push('#');
            class.push_str(tail);
        } else {
            class.push_str(word);
        }
        word.clear();
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' | '`' if word.is_empty() => {
                // A quoted value, to its closing quote (or the end).
                class.push_str("'…'");
                for inner in chars.by_ref() {
                    if inner == c {
                        break;
                    }
                }
            }
            c if c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/' | '+') => {
                word.push(c);
            }
            c if c.is_whitespace() => {
                flush(&mut word, &mut class);
                if !class.ends_with(' ') && !class.is_empty() {
                    class.push(' ');
                }
                while chars.peek().is_some_and(|next| next.is_whitespace()) {
                    chars.next();
                }
            }
            c => {
                flush(&mut word, &mut class);
                class.push(c);
            }
        }
    }
    flush(&mut word, &mut class);
    class.trim_end().to_owned()
}

/// A short name for the group of dead letters of `handler` (or topic) whose reasons have the
/// class `class`: eight hexadecimal digits of their SHA-256, stable across runs, for the
/// command line (`--group 1f2e3d4c`).
pub fn failure_group(handler: &str, class: &str) -> String {
    let digest = Sha256::new()
        .chain_update(handler.as_bytes())
        .chain_update([0])
        .chain_update(class.as_bytes())
        .finalize();
    hex::encode(&digest[..4])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_that_differ_only_by_ids_numbers_and_quotes_share_a_class() {
        let a = failure_class("charge failed: card declined for order-42 (status 402)");
        let b = failure_class("charge failed: card declined for order-7 (status 402)");
        assert_eq!(a, b);
        assert_eq!(a, "charge failed: card declined for # (status #)");
        assert_ne!(a, failure_class("charge failed: timeout for order-7"));
    }

    #[test]
    fn words_without_digits_stay_and_spaces_collapse() {
        assert_eq!(
            failure_class("  no   message id:\n the JSON field /id is missing "),
            "no message id: the JSON field /id is missing"
        );
        assert_eq!(failure_class("deadline after 10s."), "deadline after #.");
        assert_eq!(failure_class("unterminated 'quote"), "unterminated '…'");
        assert_eq!(failure_class(""), "");
    }

    #[test]
    fn groups_are_named_by_handler_and_class() {
        let one = failure_group("warehouse", "x #");
        assert_eq!(one.len(), 8);
        assert_eq!(one, failure_group("warehouse", "x #"));
        assert_ne!(one, failure_group("billing", "x #"));
    }
}
