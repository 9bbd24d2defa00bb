//! The incoming dead letters on the page: their failure groups, each with its retry and drop
//! (confirmed with the group's count on a page of its own), and the newest letters with their
//! state, their body's first bytes and their own retry and drop.

use std::time::SystemTime;

use guestlist::inbox::{DeadGroup, DeadState};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::forms::{Viewer, csrf_field};
use super::page::STYLE;
use super::snapshot::{DEAD_LETTERS_SHOWN, Snapshot};
use crate::body_text::body_text;
use crate::figures::age;

/// The body bytes a row shows.
const PREVIEW_CHARS: usize = 120;

/// The section.
pub(crate) fn incoming(viewer: &Viewer, snapshot: &Snapshot) -> Markup {
    let now = SystemTime::now();
    let ago = |at: SystemTime| age(now.duration_since(at).ok());
    html! {
        h2 { "Incoming dead letters" }
        @if let Some(incoming) = &snapshot.incoming {
        p {
            span #incoming-dead { (incoming.waiting) }
            " waiting: messages a handler gave up on. A retry puts the kept copy back on the \
             handler's source, for that handler only, under its own id: it runs once."
            @if viewer.csrf.is_some() && !viewer.broker {
                " This console has no broker to retry through: start it with --nats, --amqp, \
                 --kafka or --sqs."
            }
        }
        @if !incoming.groups.is_empty() {
            h3 { "By failure" }
            table #incoming-groups {
                tr {
                    th { "group" } th { "handler" } th.num { "letters" } th { "first" }
                    th { "last" } th { "failure" } th {}
                }
                @for group in &incoming.groups {
                    tr id={ "group-" (group.id) } {
                        td { code { (group.id) } }
                        td { (group.handler) }
                        td.num { (group.count()) }
                        td { (ago(group.first_at)) " ago" }
                        td { (ago(group.last_at)) " ago" }
                        td { (group.class) br; span.muted { "e.g. " (group.example) } }
                        td { (group_forms(viewer, group)) }
                    }
                }
            }
        }
        @if !incoming.letters.is_empty() {
            h3 { "The newest" }
            table #incoming {
                tr {
                    th { "handler" } th { "message" } th { "state" } th.num { "deliveries" }
                    th { "when" } th { "why" } th { "body" } th {}
                }
                @for letter in &incoming.letters {
                    tr.letter {
                        td { (letter.handler) }
                        td { (letter.message_id) }
                        td {
                            (letter.state.as_str())
                            @if let (Some(by), Some(at)) = (&letter.retried_by, letter.retried_at) {
                                br; span.muted { "by " (by) " " (ago(at)) " ago" }
                            }
                        }
                        td.num { (letter.deliveries) }
                        td { (ago(letter.at)) " ago" }
                        td { (letter.reason) }
                        td {
                            @match letter.body_bytes {
                                Some(bytes) => {
                                    code.preview { (preview(&letter.preview)) }
                                    br; span.muted { (bytes) " bytes" }
                                }
                                None => span.muted { "no copy kept" },
                            }
                        }
                        td {
                            @if let Some(csrf) = viewer.csrf {
                                @if viewer.broker && letter.state != DeadState::Retried {
                                    (letter_form(csrf, "retry", &letter.handler, &letter.message_id))
                                    " "
                                }
                                (letter_form(csrf, "drop", &letter.handler, &letter.message_id))
                            }
                        }
                    }
                }
            }
            @if incoming.letters.len() >= DEAD_LETTERS_SHOWN as usize {
                p.muted { "the newest " (DEAD_LETTERS_SHOWN) " shown" }
            }
        }
        } @else {
            p.muted { "no inbox dead-letter table here (the inbox's migrate creates it)" }
        }
    }
}

/// The body's first characters, as text.
fn preview(bytes: &[u8]) -> String {
    let text = body_text(bytes);
    match text.char_indices().nth(PREVIEW_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

fn letter_form(csrf: &str, action: &str, handler: &str, message: &str) -> Markup {
    html! {
        form method="post" action={ "/inbox/dead/" (action) } class={ "inline inbox-" (action) } {
            (csrf_field(csrf))
            input type="hidden" name="handler" value=(handler);
            input type="hidden" name="message" value=(message);
            button { (action) }
        }
    }
}

/// A group's retry and drop: each asks for the count on a page of its own first.
fn group_forms(viewer: &Viewer, group: &DeadGroup) -> Markup {
    html! {
        @if let Some(csrf) = viewer.csrf {
            @for action in ["retry", "drop"] {
                @if action == "drop" || viewer.broker {
                    form method="post" action={ "/inbox/group/" (group.id) "/" (action) }
                        class={ "inline group-" (action) } {
                        (csrf_field(csrf)) button { (action) " all…" }
                    }
                    " "
                }
            }
        }
    }
}

/// A failure group as the confirmation page names it.
pub(crate) struct Asked<'a> {
    /// Where the confirmed form goes (`/inbox/group/{id}/{action}`).
    pub(crate) path: String,
    pub(crate) id: &'a str,
    /// The handler or the topic.
    pub(crate) owner: &'a str,
    pub(crate) class: &'a str,
    pub(crate) count: usize,
}

impl<'a> Asked<'a> {
    /// An incoming group, for `action`.
    pub(crate) fn incoming(group: &'a DeadGroup, action: &str) -> Self {
        Self {
            path: format!("/inbox/group/{}/{action}", group.id),
            id: &group.id,
            owner: &group.handler,
            class: &group.class,
            count: group.count(),
        }
    }
}

/// The page that asks to confirm an action on a whole group, naming its count now.
pub(crate) fn confirm(csrf: &str, group: &Asked<'_>, action: &str) -> Markup {
    let count = group.count;
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "guestlist console: confirm" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { (action) " " (count) " dead letters?" }
                p #confirm-what {
                    "Group " code { (group.id) } " of " (group.owner) " holds " strong { (count) }
                    " dead letters that failed as: " (group.class)
                }
                form method="post" action=(group.path) {
                    (csrf_field(csrf))
                    input type="hidden" name="confirm" value=(count);
                    button #confirm { (action) " all " (count) }
                }
                p { a href="/" { "back to the console" } }
            }
        }
    }
}
