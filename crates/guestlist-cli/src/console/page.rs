//! The page, written as HTML on the server: every value from the database goes through
//! [`Esc`], so that a message id or a refusal's reason is shown, never run.

use std::fmt::{self, Display, Write as _};
use std::time::{Duration, SystemTime};

use guestlist::{Found, KeyState, Seen};

use super::snapshot::{DEAD_LETTERS_SHOWN, HELD_KEYS_SHOWN, OutboxFigures, Snapshot};
use crate::figures::{age, mib};

/// Text made safe to stand in HTML, between tags or inside a quoted attribute.
pub(crate) struct Esc<'a>(pub(crate) &'a str);

impl Display for Esc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(['&', '<', '>', '"', '\'']) {
            f.write_str(&rest[..at])?;
            f.write_str(match rest.as_bytes()[at] {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                _ => "&#39;",
            })?;
            rest = &rest[at + 1..];
        }
        f.write_str(rest)
    }
}

/// What a page is written for: who is looking, and what they may do.
pub(crate) struct Viewer<'a> {
    /// The CSRF token for the action forms; `None` shows no action (read-only, or not signed
    /// in).
    pub(crate) csrf: Option<&'a str>,
    /// Whether the console takes actions at all (started with a token).
    pub(crate) actions: bool,
}

/// What the whole page shows beyond the figures.
pub(crate) struct Frame<'a> {
    /// The database, its password masked.
    pub(crate) database: &'a str,
    /// How often the figures refresh.
    pub(crate) refresh: Duration,
    /// A line on what the last action did.
    pub(crate) flash: Option<String>,
    /// The id looked up, and what the tables know of it (or why it could not be looked up).
    pub(crate) trace: Option<(String, Result<Found, String>)>,
    /// The nonce of the page's one script.
    pub(crate) nonce: &'a str,
}

/// The most shards the page lists one by one (those held, or with messages pending).
const SHARDS_SHOWN: usize = 32;

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em;margin:0}h2{font-size:1.1em;margin:1.4em 0 .4em}h3{font-size:1em}\
table{border-collapse:collapse}td,th{padding:.2em .7em;border-bottom:1px solid #ddd;\
text-align:left;vertical-align:top}th{font-weight:600}.num{text-align:right}\
.flash{background:#eef7ee;border:1px solid #9c9;padding:.5em}.trouble{background:#fdeeee;\
border:1px solid #d99;padding:.5em}.muted{color:#666}form.inline{display:inline}\
header p{margin:.2em 0}.cols{display:flex;flex-wrap:wrap;gap:0 3em}.cols>div{max-width:40em}code{background:#f4f4f4;padding:0 .2em}";

/// The whole page.
pub(crate) fn page(frame: &Frame, viewer: &Viewer, snapshot: &Snapshot) -> String {
    let mut html = String::with_capacity(16 * 1024);
    let every = frame.refresh.as_secs().max(1);
    let _ = write!(
        html,
        "<!doctype html><html lang=en><head><meta charset=utf-8>\
         <meta name=viewport content=\"width=device-width\">\
         <title>guestlist console</title>\
         <noscript><meta http-equiv=refresh content={every}></noscript>\
         <style>{STYLE}</style></head><body><header><h1>guestlist console</h1>\
         <p class=muted>{} · figures refresh every {} · {}</p>",
        Esc(frame.database),
        humantime::format_duration(frame.refresh),
        access(viewer)
    );
    account(&mut html, viewer);
    html.push_str("</header>");
    if let Some(flash) = &frame.flash {
        let _ = write!(html, "<p class=flash id=flash>{}</p>", Esc(flash));
    }
    trace(&mut html, frame, viewer);
    html.push_str("<section id=live>");
    html.push_str(&live(viewer, snapshot));
    let _ = write!(
        html,
        "</section><script nonce=\"{nonce}\">\
         const live=document.getElementById('live');\
         setInterval(async()=>{{try{{const r=await fetch('/live',{{cache:'no-store'}});\
         if(r.ok)live.innerHTML=await r.text();}}catch(e){{}}}},{ms});</script></body></html>",
        nonce = frame.nonce,
        ms = frame.refresh.as_millis().max(250)
    );
    html
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

fn account(html: &mut String, viewer: &Viewer) {
    match (viewer.actions, viewer.csrf) {
        (false, _) => {}
        (true, None) => html.push_str(
            "<form method=post action=/login id=login>\
             <input type=password name=token placeholder=GUESTLIST_CONSOLE_TOKEN \
             autocomplete=current-password required> <button>sign in</button></form>",
        ),
        (true, Some(csrf)) => {
            let _ = write!(
                html,
                "<form method=post action=/logout id=logout>{}<button>sign out</button></form>",
                csrf_field(csrf)
            );
        }
    }
}

fn csrf_field(csrf: &str) -> String {
    format!("<input type=hidden name=csrf value=\"{}\">", Esc(csrf))
}

/// The trace form, and what the tables know of the id looked up.
fn trace(html: &mut String, frame: &Frame, viewer: &Viewer) {
    let id = frame.trace.as_ref().map_or("", |(id, _)| id.as_str());
    let _ = write!(
        html,
        "<h2>Trace</h2><form method=get action=/ id=trace>\
         <input name=trace size=48 value=\"{}\" placeholder=\"message id, Idempotency-Key, or a \
         carried key\" required> <button>look up</button></form>",
        Esc(id)
    );
    let Some((id, found)) = &frame.trace else {
        return;
    };
    html.push_str("<div id=trace-result>");
    match found {
        Err(err) => {
            let _ = write!(html, "<p class=trouble>{}</p>", Esc(err));
        }
        Ok(found) => sightings(html, id, found, viewer),
    }
    html.push_str("</div>");
}

fn sightings(html: &mut String, id: &str, found: &Found, viewer: &Viewer) {
    if !found.carried_from.is_empty() {
        let _ = write!(
            html,
            "<p>{}: carried from {}</p>",
            Esc(id),
            Esc(&found.carried_from.join(", then "))
        );
    }
    if found.sightings.is_empty() {
        let _ = write!(
            html,
            "<p>{}: no table knows it (never seen here, or purged past the retention)</p>",
            Esc(id)
        );
    } else {
        html.push_str("<table><tr><th>when<th>table<th>what<th></tr>");
        for sighting in &found.sightings {
            let _ = write!(
                html,
                "<tr><td>{}<td>{}<td>{}<td>",
                Esc(&crate::trace::when(sighting)),
                Esc(&sighting.table),
                Esc(&crate::trace::describe(&sighting.seen))
            );
            if let (
                Some(csrf),
                Seen::Key {
                    scope, key, state, ..
                },
            ) = (viewer.csrf, &sighting.seen)
            {
                evict_form(html, csrf, scope, key, state);
            }
            html.push_str("</tr>");
        }
        html.push_str("</table>");
    }
    if !found.missing.is_empty() {
        let _ = write!(
            html,
            "<p class=muted>not in this database: {}</p>",
            Esc(&found.missing.join(", "))
        );
    }
}

fn evict_form(html: &mut String, csrf: &str, scope: &str, key: &str, state: &KeyState) {
    let _ = write!(
        html,
        "<form method=post action=/keys/evict class=\"inline evict\">{}\
         <input type=hidden name=scope value=\"{}\"><input type=hidden name=key value=\"{}\">",
        csrf_field(csrf),
        Esc(scope),
        Esc(key)
    );
    if matches!(state, KeyState::InFlight { .. }) {
        html.push_str(
            "<label title=\"a retry may then run the request a second time, and the running \
             one's answer is not stored\"><input type=checkbox name=force value=yes> even in \
             flight</label> ",
        );
    }
    html.push_str("<button>evict</button></form>");
}

/// The figures: the part of the page that refreshes itself.
pub(crate) fn live(viewer: &Viewer, snapshot: &Snapshot) -> String {
    let mut html = String::with_capacity(8 * 1024);
    let _ = write!(
        html,
        "<p class=muted>read at {}</p>",
        humantime::format_rfc3339_seconds(SystemTime::now())
    );
    for trouble in &snapshot.trouble {
        let _ = write!(html, "<p class=trouble>cannot read {}</p>", Esc(trouble));
    }
    match &snapshot.outbox {
        Some(outbox) => dead_letters(&mut html, viewer, outbox),
        None => {
            html.push_str("<h2>Outgoing dead letters</h2><p class=muted>no outbox table here</p>")
        }
    }
    incoming(&mut html, snapshot);
    html.push_str("<div class=cols><div>");
    keys(&mut html, viewer, snapshot);
    html.push_str("</div><div>");
    inbox(&mut html, snapshot);
    html.push_str("</div><div>");
    if let Some(outbox) = section(&mut html, "Outbox", snapshot.outbox.as_ref()) {
        relays(&mut html, outbox);
    }
    html.push_str("</div><div>");
    purge(&mut html, snapshot);
    html.push_str("</div></div>");
    html
}

/// One row of a two-column table: a name and its figure, the figure's cell with an id.
fn figure(html: &mut String, name: &str, id: &str, value: impl Display) {
    let _ = write!(
        html,
        "<tr><th>{name}<td class=num id={id}>{}</tr>",
        Esc(&value.to_string())
    );
}

/// A section's heading, then its table's figures if the table is there, or a line saying
/// it is not.
fn section<'a, T>(html: &mut String, title: &str, table: Option<&'a T>) -> Option<&'a T> {
    let _ = write!(html, "<h2>{title}</h2>");
    if table.is_none() {
        let _ = write!(
            html,
            "<p class=muted>no {} table here</p>",
            title.to_lowercase()
        );
    }
    table
}

/// The messages consumers dead-lettered, as their inbox recorded them.
fn incoming(html: &mut String, snapshot: &Snapshot) {
    html.push_str("<h2>Incoming dead letters</h2>");
    let Some((count, letters)) = &snapshot.incoming else {
        html.push_str(
            "<p class=muted>no inbox dead-letter table here (the inbox's migrate creates it)</p>",
        );
        return;
    };
    let _ = write!(
        html,
        "<p><span id=incoming-dead>{count}</span> dead-lettered by a handler. Each message is in \
         its broker's dead-letter place (a RabbitMQ dead-letter exchange, an SQS redrive queue, a \
         JetStream or Kafka dead-letter stream): replay it from there with the broker's tools.</p>"
    );
    if letters.is_empty() {
        return;
    }
    html.push_str("<table id=incoming><tr><th>handler<th>message<th>deliveries<th>when<th>why");
    for letter in letters {
        let ago = SystemTime::now().duration_since(letter.at).ok();
        let _ = write!(
            html,
            "<tr><td>{}<td>{}<td class=n>{}<td>{} ago<td>{}",
            Esc(&letter.handler),
            Esc(&letter.message_id),
            letter.deliveries,
            Esc(&age(ago)),
            Esc(&letter.reason)
        );
    }
    html.push_str("</table>");
    if *count > u64::from(DEAD_LETTERS_SHOWN) {
        let _ = write!(
            html,
            "<p class=muted>the newest {DEAD_LETTERS_SHOWN} of {count}</p>"
        );
    }
}

fn keys(html: &mut String, viewer: &Viewer, snapshot: &Snapshot) {
    let Some(keys) = section(html, "Idempotency keys", snapshot.keys.as_ref()) else {
        return;
    };
    html.push_str("<table>");
    figure(html, "keys", "keys-rows", keys.rows);
    figure(html, "in flight", "keys-in-flight", keys.in_flight);
    figure(html, "oldest", "keys-oldest", age(keys.oldest));
    figure(html, "size", "keys-size", mib(keys.bytes));
    html.push_str("</table>");
    if snapshot.held.is_empty() {
        return;
    }
    let _ = write!(
        html,
        "<h3>In flight</h3><table id=held><tr><th>key<th>scope<th>attempt<th>lease\
         <th>claimed{}",
        if viewer.csrf.is_some() { "<th>" } else { "" }
    );
    for held in &snapshot.held {
        let lease = match held.state {
            KeyState::InFlight { lease_left } => format!("{} left", age(Some(lease_left))),
            _ => "abandoned: the next retry takes over".to_owned(),
        };
        let _ = write!(
            html,
            "<tr><td>{}<td title=\"{}\">{}<td class=n>{}<td>{}<td>{} ago",
            Esc(&held.key),
            Esc(&held.scope),
            Esc(&short(&held.scope)),
            held.attempt,
            Esc(&lease),
            Esc(&age(Some(held.age)))
        );
        if let (Some(csrf), false) = (viewer.csrf, snapshot.keys_hashed) {
            html.push_str("<td>");
            evict_form(html, csrf, &held.scope, &held.key, &held.state);
        }
    }
    html.push_str("</table>");
    if keys.in_flight > u64::from(HELD_KEYS_SHOWN) {
        let _ = write!(
            html,
            "<p class=muted>the newest {HELD_KEYS_SHOWN} of {}</p>",
            keys.in_flight
        );
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

fn inbox(html: &mut String, snapshot: &Snapshot) {
    let Some(inbox) = section(html, "Inbox", snapshot.inbox.as_ref()) else {
        return;
    };
    html.push_str("<table>");
    figure(html, "rows", "inbox-rows", inbox.rows);
    figure(html, "oldest", "inbox-oldest", age(inbox.oldest));
    let size = &inbox.size;
    figure(html, "table", "inbox-size", mib(size.table_bytes));
    figure(html, "indexes", "inbox-index-size", mib(size.index_bytes));
    html.push_str("</table><table id=handlers><tr><th>handler<th>rows<th>oldest</tr>");
    for handler in &inbox.handlers {
        let _ = write!(
            html,
            "<tr><td>{}<td class=num>{}<td>{}</tr>",
            Esc(&handler.handler),
            handler.rows,
            Esc(&age(handler.oldest))
        );
    }
    html.push_str("</table>");
}

fn relays(html: &mut String, outbox: &OutboxFigures) {
    let stats = &outbox.stats;
    html.push_str("<table>");
    figure(html, "rows", "outbox-rows", stats.rows);
    figure(html, "pending", "outbox-pending", stats.pending);
    figure(
        html,
        "oldest pending",
        "outbox-oldest",
        age(stats.oldest_pending),
    );
    figure(html, "size", "outbox-size", mib(stats.bytes));
    html.push_str("</table><h3>Relays and shards</h3>");
    if stats.relays.is_empty() {
        html.push_str("<p class=muted id=relays>no relay runs (none beats its heartbeat)</p>");
    } else {
        html.push_str("<table id=relays><tr><th>relay<th>shards<th>pending<th>lag</tr>");
        for relay in &stats.relays {
            let shards: Vec<String> = relay.shards.iter().map(u32::to_string).collect();
            let _ = write!(
                html,
                "<tr><td>{}<td>{}<td class=num>{}<td>{}</tr>",
                Esc(&relay.holder),
                if shards.is_empty() {
                    "none yet (or stands by)".to_owned()
                } else {
                    shards.join(" ")
                },
                relay.pending,
                Esc(&age(relay.oldest_pending))
            );
        }
        html.push_str("</table>");
    }
    let busy: Vec<_> = stats
        .shards
        .iter()
        .filter(|shard| shard.lease.expires_in.is_some() || shard.pending > 0)
        .collect();
    let _ = write!(
        html,
        "<p class=muted>{} shards, {} held by a relay</p>",
        stats.shards.len(),
        stats.shards.len() - stats.unheld().len()
    );
    if busy.is_empty() {
        return;
    }
    html.push_str(
        "<table id=shards><tr><th>shard<th>held by<th>token<th>lease left<th>pending\
         <th>oldest</tr>",
    );
    for shard in busy.iter().take(SHARDS_SHOWN) {
        let holder = match (&shard.lease.holder, shard.lease.expires_in) {
            (Some(holder), Some(_)) => holder.clone(),
            (Some(holder), None) => format!("none (last {holder})"),
            (None, _) => "none".to_owned(),
        };
        let _ = write!(
            html,
            "<tr><td class=num>{}<td>{}<td class=num>{}<td>{}<td class=num>{}<td>{}</tr>",
            shard.shard,
            Esc(&holder),
            shard.lease.token,
            Esc(&age(shard.lease.expires_in)),
            shard.pending,
            Esc(&age(shard.oldest_pending))
        );
    }
    html.push_str("</table>");
    if busy.len() > SHARDS_SHOWN {
        let _ = write!(
            html,
            "<p class=muted>the first {SHARDS_SHOWN} of {} shards held or with messages \
             pending shown</p>",
            busy.len()
        );
    }
}

fn dead_letters(html: &mut String, viewer: &Viewer, outbox: &OutboxFigures) {
    html.push_str("<h2>Outgoing dead letters</h2>");
    let Some(dead) = outbox.dead else {
        html.push_str(
            "<p class=muted>no dead-letter table: run <code>guestlist migrate --outbox</code></p>",
        );
        return;
    };
    let _ = write!(
        html,
        "<p><span id=outbox-dead>{dead}</span> refused for good"
    );
    if dead > u64::from(DEAD_LETTERS_SHOWN) {
        let _ = write!(html, " (the oldest {DEAD_LETTERS_SHOWN} shown)");
    }
    html.push_str("</p>");
    if outbox.letters.is_empty() {
        return;
    }
    html.push_str(
        "<table id=dead-letters><tr><th>id<th>message<th>topic<th>key #<th>bytes<th>age\
         <th>why<th></tr>",
    );
    for letter in &outbox.letters {
        let _ = write!(
            html,
            "<tr id=dead-{id}><td class=num>{id}<td>{}<td>{}<td>{}<td class=num>{}<td>{}<td>{}<td>",
            Esc(&letter.message_id),
            Esc(&letter.topic),
            Esc(&letter
                .ordering_key
                .as_ref()
                .map_or_else(|| "-".to_owned(), |key| format!("{key} #{}", letter.seq))),
            letter.payload_bytes,
            Esc(&age(Some(letter.age))),
            Esc(&letter.reason),
            id = letter.id,
        );
        if let Some(csrf) = viewer.csrf {
            for (action, title) in [
                ("retry", "back to the outbox, after what is pending"),
                ("drop", "delete it for good"),
            ] {
                let _ = write!(
                    html,
                    "<form method=post action=/dead/{}/{action} class=\"inline {action}\" \
                     title=\"{title}\">{}<button>{action}</button></form> ",
                    letter.id,
                    csrf_field(csrf)
                );
            }
        }
        html.push_str("</tr>");
    }
    html.push_str("</table>");
}

fn purge(html: &mut String, snapshot: &Snapshot) {
    html.push_str(
        "<h2>Purge</h2><table id=purge><tr><th>table<th>past its retention<th>retention</tr>",
    );
    for (table, rows, retention) in &snapshot.purge {
        let _ = write!(
            html,
            "<tr><td>{}<td class=num>{rows}<td>{}</tr>",
            Esc(table),
            humantime::format_duration(*retention)
        );
    }
    html.push_str("</table>");
    if let Some(dead) = snapshot.inbox.as_ref().and_then(|i| i.size.dead_rows) {
        let _ = write!(
            html,
            "<p class=muted>inbox: {dead} rows purged, not yet vacuumed</p>"
        );
    }
    html.push_str(
        "<p class=muted>Rows past the retention wait for the next purge (<code>guestlist \
         purge</code>, or a service's purger); a count that keeps growing means none runs. The \
         retentions are the console's <code>--inbox-retention</code> and \
         <code>--key-retention</code>.</p>",
    );
}

/// A page of its own for a refused request: what happened and what to do.
pub(crate) fn refusal(message: &str) -> String {
    format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>guestlist console: \
         refused</title><style>{STYLE}</style></head><body><h1>Refused</h1>\
         <p class=trouble id=refusal>{}</p><p><a href=/>back to the console</a></p></body></html>",
        Esc(message)
    )
}

#[cfg(test)]
mod tests {
    use super::Esc;

    #[test]
    fn console_escapes_what_the_database_holds() {
        assert_eq!(
            Esc("<script>alert('x')</script> & \"y\"").to_string(),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;y&quot;"
        );
        assert_eq!(Esc("plain").to_string(), "plain");
    }
}
