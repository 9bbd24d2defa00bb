//! The page, written as HTML on the server with maud, which escapes every value it is given:
//! a message id or a refusal's reason is shown, never run. Only the page's own style and script
//! go in unescaped.

use std::time::Duration;

use guestlist::history::{Found, Seen};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::Tables;
use super::done::Done;
use super::forms::{Viewer, csrf_field, evict_form};
use super::live::live;
use super::snapshot::Snapshot;

/// What the whole page shows beyond the figures.
pub(crate) struct Frame<'a> {
    /// The database, its password masked.
    pub(crate) database: &'a str,
    /// How often the figures refresh.
    pub(crate) refresh: Duration,
    /// What the last action did, and the tables it names.
    pub(crate) done: Option<(Done, &'a Tables)>,
    /// The id looked up, and what the tables know of it (or why it could not be looked up).
    pub(crate) trace: Option<(String, Result<Found, String>)>,
    /// The nonce of the page's one script.
    pub(crate) nonce: &'a str,
    /// The charts' span.
    pub(crate) span: super::chart::Span,
}

pub(super) const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em;margin:0}h2{font-size:1.1em;margin:1.4em 0 .4em}h3{font-size:1em}\
table{border-collapse:collapse}td,th{padding:.2em .7em;border-bottom:1px solid #ddd;\
text-align:left;vertical-align:top}th{font-weight:600}.num{text-align:right}\
.flash{background:#eef7ee;border:1px solid #9c9;padding:.5em}.trouble{background:#fdeeee;\
border:1px solid #d99;padding:.5em}.muted{color:#666}form.inline{display:inline}\
header p{margin:.2em 0}.cols{display:flex;flex-wrap:wrap;gap:0 3em}.cols>div{max-width:40em}code{background:#f4f4f4;padding:0 .2em}";

/// The whole page.
pub(crate) fn page(frame: &Frame, viewer: &Viewer, snapshot: &Snapshot, charts: Markup) -> Markup {
    let every = frame.refresh.as_secs().max(1);
    // Refetches the figures; the interval is a number, nothing from outside.
    let script = format!(
        "const live=document.getElementById('live');\
         setInterval(async()=>{{try{{const r=await fetch('/live?span={}',{{cache:'no-store'}});\
         if(r.ok)live.innerHTML=await r.text();}}catch(e){{}}}},{});",
        frame.span.name(),
        frame.refresh.as_millis().max(250)
    );
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width";
                title { "guestlist console" }
                noscript { meta http-equiv="refresh" content=(every); }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    h1 { "guestlist console" }
                    p.muted {
                        (frame.database) " · figures refresh every "
                        (humantime::format_duration(frame.refresh)) " · " (access(viewer))
                    }
                    (account(viewer))
                }
                @if let Some((done, tables)) = &frame.done {
                    p.flash #flash { (done.message(tables)) }
                }
                (history(frame, viewer))
                section #live { (live(viewer, snapshot, charts)) }
                script nonce=(frame.nonce) { (PreEscaped(script)) }
            }
        }
    }
}

fn access(viewer: &Viewer) -> &'static str {
    match (viewer.actions, viewer.csrf.is_some()) {
        (false, _) => {
            "read-only (start it with GUESTLIST_CONSOLE_TOKEN set to retry, drop and evict)"
        }
        (true, false) => "sign in with GUESTLIST_CONSOLE_TOKEN to retry, drop and evict",
        (true, true) => "signed in: actions enabled",
    }
}

fn account(viewer: &Viewer) -> Markup {
    html! {
        @match (viewer.actions, viewer.csrf) {
            (false, _) => {}
            (true, None) => form method="post" action="/login" #login {
                input type="password" name="token" placeholder="GUESTLIST_CONSOLE_TOKEN"
                    autocomplete="current-password" required;
                " " button { "sign in" }
            },
            (true, Some(csrf)) => form method="post" action="/logout" #logout {
                (csrf_field(csrf)) button { "sign out" }
            },
        }
    }
}

/// The history form, and what the tables know of the id looked up.
fn history(frame: &Frame, viewer: &Viewer) -> Markup {
    let id = frame.trace.as_ref().map_or("", |(id, _)| id.as_str());
    html! {
        h2 { "History" }
        form method="get" action="/" #trace {
            input name="trace" size="48" value=(id)
                placeholder="message id, Idempotency-Key, or a carried key" required;
            " " button { "look up" }
        }
        @if let Some((id, found)) = &frame.trace {
            div #trace-result {
                @match found {
                    Err(err) => p.trouble { (err) },
                    Ok(found) => (sightings(id, found, viewer)),
                }
            }
        }
    }
}

fn sightings(id: &str, found: &Found, viewer: &Viewer) -> Markup {
    html! {
        @if !found.carried_from.is_empty() {
            p { (id) ": carried from " (found.carried_from.join(", then ")) }
        }
        @if found.sightings.is_empty() {
            p { (id) ": no table knows it (never seen here, or purged past the retention)" }
        } @else {
            table {
                tr { th { "when" } th { "table" } th { "what" } th {} }
                @for sighting in &found.sightings {
                    tr {
                        td { (crate::history::when(sighting)) }
                        td { (sighting.table) }
                        td { (crate::history::describe(&sighting.seen)) }
                        td {
                            @if let (Some(csrf), Seen::Key { scope, key, state, .. }) =
                                (viewer.csrf, &sighting.seen)
                            {
                                (evict_form(csrf, scope, key, state))
                            }
                        }
                    }
                }
            }
        }
        @if !found.missing.is_empty() {
            p.muted { "not in this database: " (found.missing.join(", ")) }
        }
    }
}

/// A page of its own for a refused request: what happened and what to do.
pub(crate) fn refusal(message: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "guestlist console: refused" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { "Refused" }
                p.trouble #refusal { (message) }
                p { a href="/" { "back to the console" } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::refusal;

    #[test]
    fn console_escapes_what_the_database_holds() {
        let page = refusal("<script>alert('x')</script> & \"y\"").into_string();
        assert!(
            page.contains("&lt;script&gt;alert('x')&lt;/script&gt; &amp; &quot;y&quot;"),
            "{page}"
        );
        assert!(!page.contains("<script>"), "{page}");
    }
}
