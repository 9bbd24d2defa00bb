//! The message ids an id stands for: a key carried downstream names the work it was carried
//! from (`handler:message/step`, `scope:key/step`), hop by hop.

/// `id` itself, then each parent it was carried from, nearest first: `warehouse:evt_9f3k/charge`
/// gives itself and `evt_9f3k`. A parent is taken only where it has the `name:` prefix every
/// carried key has, so an id that merely holds a `/` stands for itself alone.
pub(super) fn messages_of(id: &str) -> Vec<String> {
    let mut ids = vec![id.to_owned()];
    let mut current = id;
    while let Some((parent, _step)) = current.rsplit_once('/') {
        let Some((_, work)) = parent.split_once(':') else {
            break;
        };
        if work.is_empty() || ids.iter().any(|seen| seen == work) {
            break;
        }
        ids.push(work.to_owned());
        current = work;
    }
    ids
}

/// Whether the stored key `key` is `id` or was carried from it (`…:id/step…`, `id/step…`): the
/// database's `LIKE` is a first cut (SQLite's ignores ASCII case), this the exact one.
pub(super) fn carried_from(key: &str, id: &str) -> bool {
    key == id
        || key
            .strip_prefix(id)
            .is_some_and(|rest| rest.starts_with('/'))
        || key.contains(&format!(":{id}/"))
}

/// `text` with `LIKE`'s wildcards and the escape `!` escaped by `!`.
pub(super) fn like_escaped(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '!' | '%' | '_') {
            escaped.push('!');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_carried_key_stands_for_the_messages_it_was_carried_from() {
        assert_eq!(messages_of("evt_9f3k"), ["evt_9f3k"]);
        assert_eq!(
            messages_of("warehouse:evt_9f3k/charge"),
            ["warehouse:evt_9f3k/charge", "evt_9f3k"]
        );
        assert_eq!(
            messages_of("client-7:warehouse:evt_9f3k/charge/refund"),
            [
                "client-7:warehouse:evt_9f3k/charge/refund",
                "warehouse:evt_9f3k/charge",
                "evt_9f3k"
            ]
        );
        assert_eq!(messages_of("orders/42"), ["orders/42"], "no name: prefix");
    }

    #[test]
    fn only_keys_carried_from_the_id_match() {
        assert!(carried_from("evt_1", "evt_1"));
        assert!(carried_from("warehouse:evt_1/charge", "evt_1"));
        assert!(carried_from("evt_1/charge", "evt_1"));
        assert!(!carried_from("warehouse:evt_10/charge", "evt_1"));
        assert!(
            !carried_from("warehouse:EVT_1/charge", "evt_1"),
            "case counts"
        );
        assert_eq!(like_escaped("a_b%c!d"), "a!_b!%c!!d");
    }
}
