//! What the last action did: the line the page shows after an action sends the browser back
//! to it. It travels in the page's address as a word and the values it names, sealed for the
//! browser's session ([`Sessions::seal`](super::session::Sessions::seal)): only these words
//! are read back, and only under their seal, so that a link cannot make the page say anything.

use super::Tables;

/// What an action did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Done {
    /// The operator signed in.
    SignedIn,
    /// The operator signed out.
    SignedOut,
    /// The token given to sign in was not the console's.
    WrongToken,
    /// The outgoing dead letter is back in the outbox.
    Retried(i64),
    /// The outgoing dead letter was deleted.
    Dropped(i64),
    /// There was no such outgoing dead letter.
    NoDeadLetter(i64),
    /// The outgoing dead letter is back in the outbox, edited.
    Edited(i64),
    /// The key was evicted.
    Evicted(Key),
    /// There was no such key.
    NoKey(Key),
    /// The key is in flight and the form did not say to evict it all the same.
    InFlight(Key),
    /// The incoming dead letter was published again for its handler.
    InboxRetried(Letter),
    /// It had been retried already.
    InboxAlready(Letter),
    /// It has no copy to publish.
    InboxNoCopy(Letter),
    /// The incoming dead letter was deleted.
    InboxDropped(Letter),
    /// There was no such incoming dead letter.
    NoInboxDead(Letter),
    /// A failure group's dead letters were retried: how many of how many.
    GroupRetried(Group),
    /// A failure group's dead letters were deleted.
    GroupDropped(Group),
    /// A failure group of outgoing dead letters is back in the outbox.
    OutboxGroupRetried(Group),
    /// A failure group of outgoing dead letters was deleted.
    OutboxGroupDropped(Group),
    /// The console was started without a broker to retry incoming dead letters through.
    NoBroker,
}

/// An incoming dead letter an action named: its handler and message id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Letter {
    pub(crate) handler: String,
    pub(crate) message: String,
}

/// A failure group an action took whole: its name, and how many of its letters it changed out
/// of how many.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    pub(crate) group: String,
    pub(crate) done: usize,
    pub(crate) of: usize,
}

/// The key an eviction named: its scope and the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Key {
    pub(crate) scope: String,
    pub(crate) key: String,
}

/// [`Done`] as the page's address carries it.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct DoneQuery {
    done: Option<String>,
    // Text, not a number: a flattened field reaches serde as text.
    id: Option<String>,
    scope: Option<String>,
    key: Option<String>,
    handler: Option<String>,
    message: Option<String>,
    group: Option<String>,
    count: Option<String>,
    of: Option<String>,
    seal: Option<String>,
}

impl DoneQuery {
    /// The seal the address carries, if any.
    pub(crate) fn seal(&self) -> Option<&str> {
        self.seal.as_deref()
    }
}

impl Done {
    /// The word and the values that stand for it in the page's address.
    pub(crate) fn query(&self) -> Vec<(&'static str, String)> {
        let (word, id, key) = match self {
            Done::SignedIn => ("signed-in", None, None),
            Done::SignedOut => ("signed-out", None, None),
            Done::WrongToken => ("wrong-token", None, None),
            Done::Retried(id) => ("retried", Some(*id), None),
            Done::Dropped(id) => ("dropped", Some(*id), None),
            Done::NoDeadLetter(id) => ("no-dead", Some(*id), None),
            Done::Edited(id) => ("edited", Some(*id), None),
            Done::Evicted(key) => ("evicted", None, Some(key)),
            Done::NoKey(key) => ("no-key", None, Some(key)),
            Done::InFlight(key) => ("in-flight", None, Some(key)),
            Done::NoBroker => ("no-broker", None, None),
            Done::InboxRetried(letter)
            | Done::InboxAlready(letter)
            | Done::InboxNoCopy(letter)
            | Done::InboxDropped(letter)
            | Done::NoInboxDead(letter) => return self.letter_query(letter),
            Done::GroupRetried(group)
            | Done::GroupDropped(group)
            | Done::OutboxGroupRetried(group)
            | Done::OutboxGroupDropped(group) => {
                return self.group_query(group);
            }
        };
        let mut query = vec![("done", word.to_owned())];
        if let Some(id) = id {
            query.push(("id", id.to_string()));
        }
        if let Some(key) = key {
            query.push(("scope", key.scope.clone()));
            query.push(("key", key.key.clone()));
            // The page looks the key up again, to show where it stands now.
            query.push(("trace", key.key.clone()));
        }
        query
    }

    fn letter_query(&self, letter: &Letter) -> Vec<(&'static str, String)> {
        let word = match self {
            Done::InboxRetried(_) => "inbox-retried",
            Done::InboxAlready(_) => "inbox-already",
            Done::InboxNoCopy(_) => "inbox-no-copy",
            Done::InboxDropped(_) => "inbox-dropped",
            _ => "no-inbox-dead",
        };
        vec![
            ("done", word.to_owned()),
            ("handler", letter.handler.clone()),
            ("message", letter.message.clone()),
        ]
    }

    fn group_query(&self, group: &Group) -> Vec<(&'static str, String)> {
        let word = match self {
            Done::GroupRetried(_) => "group-retried",
            Done::OutboxGroupRetried(_) => "outbox-group-retried",
            Done::OutboxGroupDropped(_) => "outbox-group-dropped",
            _ => "group-dropped",
        };
        vec![
            ("done", word.to_owned()),
            ("group", group.group.clone()),
            ("count", group.done.to_string()),
            ("of", group.of.to_string()),
        ]
    }

    /// The word and its values as the page's address carries them (what a seal signs).
    pub(crate) fn address(&self) -> String {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        for (name, value) in self.query() {
            query.append_pair(name, &value);
        }
        query.finish()
    }

    /// What the page's address says was done, if it names a known word.
    pub(crate) fn from_query(query: &DoneQuery) -> Option<Done> {
        let id = || {
            let id = query.id.as_deref().unwrap_or_default();
            id.parse::<i64>().unwrap_or_default()
        };
        let key = || Key {
            scope: query.scope.clone().unwrap_or_default(),
            key: query.key.clone().unwrap_or_default(),
        };
        let letter = || Letter {
            handler: query.handler.clone().unwrap_or_default(),
            message: query.message.clone().unwrap_or_default(),
        };
        let number = |n: &Option<String>| n.as_deref().unwrap_or_default().parse().unwrap_or(0);
        let group = || Group {
            group: query.group.clone().unwrap_or_default(),
            done: number(&query.count),
            of: number(&query.of),
        };
        Some(match query.done.as_deref()? {
            "signed-in" => Done::SignedIn,
            "signed-out" => Done::SignedOut,
            "wrong-token" => Done::WrongToken,
            "retried" => Done::Retried(id()),
            "dropped" => Done::Dropped(id()),
            "no-dead" => Done::NoDeadLetter(id()),
            "edited" => Done::Edited(id()),
            "evicted" => Done::Evicted(key()),
            "no-key" => Done::NoKey(key()),
            "in-flight" => Done::InFlight(key()),
            "no-broker" => Done::NoBroker,
            "inbox-retried" => Done::InboxRetried(letter()),
            "inbox-already" => Done::InboxAlready(letter()),
            "inbox-no-copy" => Done::InboxNoCopy(letter()),
            "inbox-dropped" => Done::InboxDropped(letter()),
            "no-inbox-dead" => Done::NoInboxDead(letter()),
            "group-retried" => Done::GroupRetried(group()),
            "group-dropped" => Done::GroupDropped(group()),
            "outbox-group-retried" => Done::OutboxGroupRetried(group()),
            "outbox-group-dropped" => Done::OutboxGroupDropped(group()),
            _ => return None,
        })
    }

    /// The line the page shows.
    pub(crate) fn message(&self, tables: &Tables) -> String {
        match self {
            Done::SignedIn => "signed in: retry, drop and evict are enabled".to_owned(),
            Done::SignedOut => "signed out".to_owned(),
            Done::WrongToken => "that is not the console's token: sign in with the value of \
                 GUESTLIST_CONSOLE_TOKEN it was started with"
                .to_owned(),
            Done::Retried(id) => format!(
                "dead letter {id} is back in {}: the relay publishes it after what is pending",
                tables.outbox
            ),
            Done::Dropped(id) => format!("dead letter {id} dropped"),
            Done::Edited(id) => format!(
                "dead letter {id} is back, edited, in {}: the relay publishes it after what is \
                 pending",
                tables.outbox
            ),
            Done::NoDeadLetter(id) => {
                format!("no dead letter {id}: it was retried or dropped already")
            }
            Done::Evicted(Key { scope, key }) => format!(
                "key {key} in scope {scope} evicted: the next request with it runs again (a \
                 gateway that stored or replayed it lately may still answer from memory until \
                 its --replay-cache-ttl ends)"
            ),
            Done::NoKey(Key { scope, key }) => {
                format!("no key {key} in scope {scope}: nothing removed")
            }
            Done::InFlight(Key { scope, key }) => format!(
                "key {key} in scope {scope} is in flight: evicting it now lets a retry run the \
                 request again while the first may still be running, and the first one's answer \
                 would not be stored. Wait for its lease, or tick \"even in flight\""
            ),
            Done::NoBroker => "this console has no broker to retry incoming dead letters \
                 through: start it with --nats URL, --amqp URL, --kafka HOST:PORT or --sqs"
                .to_owned(),
            Done::InboxRetried(Letter { handler, message }) => {
                format!("{message} is back on {handler}'s source: {handler} alone runs it, once")
            }
            Done::InboxAlready(Letter { handler, message }) => {
                format!("{message} of {handler} was retried already")
            }
            Done::InboxNoCopy(Letter { handler, message }) => format!(
                "{message} of {handler} has no copy to publish (over 4 MiB, or recorded before \
                 copies were kept): replay it from the broker's dead-letter place"
            ),
            Done::InboxDropped(Letter { handler, message }) => {
                format!("{message} of {handler} dropped")
            }
            Done::NoInboxDead(Letter { handler, message }) => {
                format!("no dead letter {message} of {handler}: dropped already?")
            }
            Done::GroupRetried(Group { group, done, of }) => {
                format!("group {group}: {done} of {of} dead letters back on their handler's source")
            }
            Done::GroupDropped(Group { group, done, of })
            | Done::OutboxGroupDropped(Group { group, done, of }) => {
                format!("group {group}: {done} of {of} dead letters dropped")
            }
            Done::OutboxGroupRetried(Group { group, done, of }) => format!(
                "group {group}: {done} of {of} dead letters back in {}: the relay publishes \
                 them after what is pending",
                tables.outbox
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Done, DoneQuery, Group, Key, Letter};

    /// What an action puts in the address reads back as the same outcome.
    #[test]
    fn an_outcome_reads_back_from_the_address_it_wrote() {
        let key = Key {
            scope: "client-shop".to_owned(),
            key: "k-1".to_owned(),
        };
        let letter = Letter {
            handler: "warehouse".to_owned(),
            message: "evt_1".to_owned(),
        };
        let group = Group {
            group: "5b1c0e7a".to_owned(),
            done: 2,
            of: 3,
        };
        for done in [
            Done::SignedIn,
            Done::SignedOut,
            Done::WrongToken,
            Done::Retried(7),
            Done::Dropped(8),
            Done::NoDeadLetter(9),
            Done::Edited(10),
            Done::Evicted(key.clone()),
            Done::NoKey(key.clone()),
            Done::InFlight(key.clone()),
            Done::NoBroker,
            Done::InboxRetried(letter.clone()),
            Done::InboxAlready(letter.clone()),
            Done::InboxNoCopy(letter.clone()),
            Done::InboxDropped(letter.clone()),
            Done::NoInboxDead(letter.clone()),
            Done::GroupRetried(group.clone()),
            Done::GroupDropped(group.clone()),
            Done::OutboxGroupRetried(group.clone()),
            Done::OutboxGroupDropped(group.clone()),
        ] {
            let field = |name: &str| {
                done.query()
                    .into_iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, value)| value)
            };
            let query = DoneQuery {
                done: field("done"),
                id: field("id"),
                scope: field("scope"),
                key: field("key"),
                handler: field("handler"),
                message: field("message"),
                group: field("group"),
                count: field("count"),
                of: field("of"),
                seal: None,
            };
            let read = Done::from_query(&query);
            assert_eq!(read, Some(done.clone()));
            assert_eq!(
                read.unwrap().address(),
                done.address(),
                "the same words, sealed alike"
            );
        }
        let unknown = DoneQuery {
            done: Some("pwned".to_owned()),
            ..DoneQuery::default()
        };
        assert_eq!(Done::from_query(&unknown), None);
    }
}
