//! The figures: the part of the page that refreshes itself (`GET /live`).

use std::fmt::Display;
use std::time::SystemTime;

use guestlist::keys::KeyState;
use maud::{Markup, html};

use super::forms::{Viewer, csrf_field, evict_form};
use super::snapshot::{
    DEAD_LETTERS_SHOWN, HELD_KEYS_SHOWN, MID_STEPS_SHOWN, OutboxFigures, Snapshot,
};
use crate::figures::{age, mib};

/// The most shards the page lists one by one (those held, or with messages pending).
const SHARDS_SHOWN: usize = 32;

/// The figures, read now.
pub(crate) fn live(viewer: &Viewer, snapshot: &Snapshot, charts: Markup) -> Markup {
    html! {
        p.muted { "read at " (humantime::format_rfc3339_seconds(SystemTime::now())) }
        @for trouble in &snapshot.trouble {
            p.trouble { "cannot read " (trouble) }
        }
        @match &snapshot.outbox {
            Some(outbox) => (dead_letters(viewer, outbox)),
            None => {
                h2 { "Outgoing dead letters" }
                p.muted { "no outbox table here" }
            }
        }
        (super::incoming::incoming(viewer, snapshot))
        (mid_steps(snapshot))
        (charts)
        div.cols {
            div { (keys(viewer, snapshot)) }
            div { (inbox(snapshot)) }
            div {
                (heading("Outbox", snapshot.outbox.is_some()))
                @if let Some(outbox) = &snapshot.outbox { (relays(outbox)) }
            }
            div { (purge(snapshot)) }
        }
    }
}

/// One row of a two-column table: a name and its figure, the figure's cell with an id.
fn figure(name: &str, id: &str, value: impl Display) -> Markup {
    html! { tr { th { (name) } td.num id=(id) { (value) } } }
}

/// A section's heading, then a line saying its table is not there when it is not.
fn heading(title: &str, there: bool) -> Markup {
    html! {
        h2 { (title) }
        @if !there { p.muted { "no " (title.to_lowercase()) " table here" } }
    }
}

/// The messages whose steps are not finished, with the step each is on.
fn mid_steps(snapshot: &Snapshot) -> Markup {
    html! {
        @if let Some(runs) = &snapshot.mid_steps {
            @if !runs.is_empty() {
                h2 { "Mid-steps" }
                p {
                    "Messages whose handler's steps are not finished. A run whose lease ended \
                     died, stalled or gave up (a dead letter): the message's next delivery \
                     resumes after the steps done."
                }
                table #mid-steps {
                    tr {
                        th { "handler" } th { "message" } th { "steps done" } th { "on" }
                        th { "lease" }
                    }
                    @for run in runs {
                        tr {
                            td { (run.handler) }
                            td { (run.message_id) }
                            td.n { (run.steps_done) }
                            td {
                                @match &run.last_step {
                                    Some(step) => { "the step after " (step) }
                                    None => "its first step",
                                }
                            }
                            td {
                                @match (run.lease_left, run.stalled_for) {
                                    (Some(left), _) => { "holds, " (age(Some(left))) " left" }
                                    (None, stalled) => { "ended " (age(stalled)) " ago" }
                                }
                            }
                        }
                    }
                }
                @if runs.len() >= MID_STEPS_SHOWN as usize {
                    p.muted { "the " (MID_STEPS_SHOWN) " longest stalled" }
                }
            }
        }
    }
}

fn keys(viewer: &Viewer, snapshot: &Snapshot) -> Markup {
    let evicts = viewer.csrf.filter(|_| !snapshot.keys_hashed);
    html! {
        (heading("Idempotency keys", snapshot.keys.is_some()))
        @if let Some(keys) = &snapshot.keys {
            table {
                (figure("keys", "keys-rows", keys.rows))
                (figure("in flight", "keys-in-flight", keys.in_flight))
                (figure("oldest", "keys-oldest", age(keys.oldest)))
                (figure("size", "keys-size", mib(keys.bytes)))
            }
            @if !snapshot.held.is_empty() {
                h3 { "In flight" }
                table #held {
                    tr {
                        th { "key" } th { "scope" } th { "attempt" } th { "lease" }
                        th { "claimed" }
                        @if viewer.csrf.is_some() { th {} }
                    }
                    @for held in &snapshot.held {
                        tr {
                            td { (held.key) }
                            td title=(held.scope) { (short(&held.scope)) }
                            td.n { (held.attempt) }
                            td {
                                @match held.state {
                                    KeyState::InFlight { lease_left } => {
                                        (age(Some(lease_left))) " left"
                                    }
                                    _ => "abandoned: the next retry takes over",
                                }
                            }
                            td { (age(Some(held.age))) " ago" }
                            @if let Some(csrf) = evicts {
                                td { (evict_form(csrf, &held.scope, &held.key, &held.state)) }
                            }
                        }
                    }
                }
                @if keys.in_flight > u64::from(HELD_KEYS_SHOWN) {
                    p.muted { "the newest " (HELD_KEYS_SHOWN) " of " (keys.in_flight) }
                }
            }
        }
    }
}

/// A long scope (`cred:` and a SHA-256) cut to what tells clients apart.
fn short(scope: &str) -> String {
    if scope.chars().count() > 20 {
        format!("{}…", scope.chars().take(16).collect::<String>())
    } else {
        scope.to_owned()
    }
}

fn inbox(snapshot: &Snapshot) -> Markup {
    html! {
        (heading("Inbox", snapshot.inbox.is_some()))
        @if let Some(inbox) = &snapshot.inbox {
            table {
                (figure("rows", "inbox-rows", inbox.rows))
                (figure("oldest", "inbox-oldest", age(inbox.oldest)))
                (figure("table", "inbox-size", mib(inbox.size.table_bytes)))
                (figure("indexes", "inbox-index-size", mib(inbox.size.index_bytes)))
            }
            table #handlers {
                tr { th { "handler" } th { "rows" } th { "oldest" } }
                @for handler in &inbox.handlers {
                    tr {
                        td { (handler.handler) }
                        td.num { (handler.rows) }
                        td { (age(handler.oldest)) }
                    }
                }
            }
        }
    }
}

fn relays(outbox: &OutboxFigures) -> Markup {
    let stats = &outbox.stats;
    let busy: Vec<_> = stats
        .shards
        .iter()
        .filter(|shard| shard.lease.expires_in.is_some() || shard.pending > 0)
        .collect();
    html! {
        table {
            (figure("rows", "outbox-rows", stats.rows))
            (figure("pending", "outbox-pending", stats.pending))
            (figure("oldest pending", "outbox-oldest", age(stats.oldest_pending)))
            (figure("size", "outbox-size", mib(stats.bytes)))
        }
        h3 { "Relays and shards" }
        @if stats.relays.is_empty() {
            p.muted #relays { "no relay runs (none beats its heartbeat)" }
        } @else {
            table #relays {
                tr { th { "relay" } th { "shards" } th { "pending" } th { "lag" } }
                @for relay in &stats.relays {
                    tr {
                        td { (relay.holder) }
                        td {
                            @if relay.shards.is_empty() {
                                "none yet (or stands by)"
                            } @else {
                                (relay.shards.iter().map(u32::to_string).collect::<Vec<_>>()
                                    .join(" "))
                            }
                        }
                        td.num { (relay.pending) }
                        td { (age(relay.oldest_pending)) }
                    }
                }
            }
        }
        p.muted {
            (stats.shards.len()) " shards, " (stats.shards.len() - stats.unheld().len())
            " held by a relay"
        }
        @if !busy.is_empty() {
            table #shards {
                tr {
                    th { "shard" } th { "held by" } th { "token" } th { "lease left" }
                    th { "pending" } th { "oldest" }
                }
                @for shard in busy.iter().take(SHARDS_SHOWN) {
                    tr {
                        td.num { (shard.shard) }
                        td {
                            @match (&shard.lease.holder, shard.lease.expires_in) {
                                (Some(holder), Some(_)) => (holder),
                                (Some(holder), None) => { "none (last " (holder) ")" }
                                (None, _) => "none",
                            }
                        }
                        td.num { (shard.lease.token) }
                        td { (age(shard.lease.expires_in)) }
                        td.num { (shard.pending) }
                        td { (age(shard.oldest_pending)) }
                    }
                }
            }
            @if busy.len() > SHARDS_SHOWN {
                p.muted {
                    "the first " (SHARDS_SHOWN) " of " (busy.len())
                    " shards held or with messages pending shown"
                }
            }
        }
    }
}

fn dead_letters(viewer: &Viewer, outbox: &OutboxFigures) -> Markup {
    html! {
        h2 { "Outgoing dead letters" }
        @if let Some(dead) = outbox.dead {
            p {
                span #outbox-dead { (dead) } " refused for good"
                @if dead > u64::from(DEAD_LETTERS_SHOWN) {
                    " (the oldest " (DEAD_LETTERS_SHOWN) " shown)"
                }
            }
            @if !outbox.groups.is_empty() {
                (outgoing_groups(viewer, outbox))
            }
            @if !outbox.letters.is_empty() {
                table #dead-letters {
                    tr {
                        th { "id" } th { "message" } th { "topic" } th { "key #" } th { "bytes" }
                        th { "age" } th { "why" } th {}
                    }
                    @for letter in &outbox.letters {
                        tr id={ "dead-" (letter.id) } {
                            td.num { (letter.id) }
                            td { (letter.message_id) }
                            td { (letter.topic) }
                            td {
                                @match &letter.ordering_key {
                                    Some(key) => { (key) " #" (letter.seq) }
                                    None => "-",
                                }
                            }
                            td.num { (letter.payload_bytes) }
                            td { (age(Some(letter.age))) }
                            td { (letter.reason) }
                            td {
                                @if let Some(csrf) = viewer.csrf {
                                    a.edit href={ "/dead/" (letter.id) "/edit" }
                                        title="change its body or headers, then retry it" { "edit" }
                                    " "
                                    @for (action, title) in [
                                        ("retry", "back to the outbox, after what is pending"),
                                        ("drop", "delete it for good"),
                                    ] {
                                        form method="post"
                                            action={ "/dead/" (letter.id) "/" (action) }
                                            class={ "inline " (action) } title=(title) {
                                            (csrf_field(csrf)) button { (action) }
                                        }
                                        " "
                                    }
                                }
                            }
                        }
                    }
                }
            }
        } @else {
            p.muted { "no dead-letter table: run " code { "guestlist migrate --outbox" } }
        }
    }
}

/// The outgoing dead letters' failure groups, each with its retry and drop (asked to confirm
/// with the count on a page of its own).
fn outgoing_groups(viewer: &Viewer, outbox: &OutboxFigures) -> Markup {
    html! {
        table #outgoing-groups {
            tr {
                th { "group" } th { "topic" } th.num { "letters" } th { "first" } th { "last" }
                th { "failure" } th {}
            }
            @for group in &outbox.groups {
                tr id={ "outgoing-group-" (group.id) } {
                    td { code { (group.id) } }
                    td { (group.topic) }
                    td.num { (group.count()) }
                    td { (age(Some(group.first_age))) " ago" }
                    td { (age(Some(group.last_age))) " ago" }
                    td { (group.class) br; span.muted { "e.g. " (group.example) } }
                    td {
                        @if let Some(csrf) = viewer.csrf {
                            @for action in ["retry", "drop"] {
                                form method="post"
                                    action={ "/outbox/group/" (group.id) "/" (action) }
                                    class={ "inline group-" (action) } {
                                    (csrf_field(csrf)) button { (action) " all…" }
                                }
                                " "
                            }
                        }
                    }
                }
            }
        }
    }
}

fn purge(snapshot: &Snapshot) -> Markup {
    html! {
        h2 { "Purge" }
        table #purge {
            tr { th { "table" } th { "past its retention" } th { "retention" } }
            @for (table, rows, retention) in &snapshot.purge {
                tr {
                    td { (table) }
                    td.num { (rows) }
                    td { (humantime::format_duration(*retention)) }
                }
            }
        }
        @if let Some(dead) = snapshot.inbox.as_ref().and_then(|i| i.size.dead_rows) {
            p.muted { "inbox: " (dead) " rows purged, not yet vacuumed" }
        }
        p.muted {
            "Rows past the retention wait for the next purge (" code { "guestlist purge" }
            ", or a service's purger); a count that keeps growing means none runs. The \
             retentions are the console's " code { "--inbox-retention" } " and "
            code { "--key-retention" } "."
        }
    }
}
