//! Who is looking at the console and the forms they may submit: the viewer, the CSRF field
//! every action form carries, and the form that evicts a key (the page's history and its live
//! figures both show it).

use guestlist::keys::KeyState;
use maud::{Markup, html};

/// What a page is written for: who is looking, and what they may do.
pub(crate) struct Viewer<'a> {
    /// The CSRF token for the action forms; `None` shows no action (read-only, or not signed
    /// in).
    pub(crate) csrf: Option<&'a str>,
    /// Whether the console takes actions at all (started with a token).
    pub(crate) actions: bool,
    /// Whether the console has a broker to retry incoming dead letters through.
    pub(crate) broker: bool,
}

/// The hidden field that carries the session's CSRF token in an action form.
pub(crate) fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

/// The form that evicts the key `key` of `scope`; for a key in flight, with the box that says
/// so.
pub(crate) fn evict_form(csrf: &str, scope: &str, key: &str, state: &KeyState) -> Markup {
    html! {
        form method="post" action="/keys/evict" class="inline evict" {
            (csrf_field(csrf))
            input type="hidden" name="scope" value=(scope);
            input type="hidden" name="key" value=(key);
            @if matches!(state, KeyState::InFlight { .. }) {
                label title="a retry may then run the request a second time, and the running \
                             one's answer is not stored" {
                    input type="checkbox" name="force" value="yes";
                    " even in flight"
                }
                " "
            }
            button { "evict" }
        }
    }
}
