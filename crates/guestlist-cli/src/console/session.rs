//! Who may act: the operator's token, the signed session cookie it buys, and the CSRF token
//! each action form carries.
//!
//! A cookie is a random id and its HMAC under a secret drawn at start, and a form's CSRF token
//! is another HMAC of that id. The console keeps the ids of the sessions it opened (at most
//! [`MOST_SESSIONS`], the oldest closed first), so that signing out ends a session for good: its
//! cookie and its forms are refused afterwards, even replayed. A restart draws a new secret and
//! forgets every session, and the operator signs in again.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use axum::http::HeaderMap;
use axum::http::header::{COOKIE, HOST, ORIGIN, REFERER};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The environment variable that holds the operator's token.
pub(crate) const TOKEN_VAR: &str = "GUESTLIST_CONSOLE_TOKEN";

/// The session cookie's name.
const COOKIE_NAME: &str = "guestlist_console";

/// The shortest token taken: a short one could be guessed over the network.
const SHORTEST_TOKEN: usize = 16;

/// The most sessions open at once: signing in past it closes the oldest.
const MOST_SESSIONS: usize = 1_000;

/// The operator's token and the process's secret: what signs sessions and CSRF tokens; and the
/// sessions open now.
pub(crate) struct Sessions {
    secret: [u8; 32],
    token: [u8; 32],
    /// The ids of the open sessions, oldest first.
    open: Mutex<VecDeque<String>>,
}

/// A signed-in browser, told by its cookie.
pub(crate) struct Session {
    id: String,
}

impl Session {
    /// A name for the session in what it changed (`console-1f2e3d4c`), which neither is its id
    /// nor leads to it.
    pub(crate) fn label(&self) -> String {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(self.id.as_bytes());
        format!("console-{}", hex::encode(&digest[..4]))
    }
}

impl Sessions {
    /// Sessions for the operator who knows `token`; a token too short to resist guessing is
    /// refused with what to do.
    pub(crate) fn new(token: &str) -> anyhow::Result<Self> {
        anyhow::ensure!(
            token.len() >= SHORTEST_TOKEN,
            "{TOKEN_VAR} is {} characters; use at least {SHORTEST_TOKEN} random ones (e.g. \
             `openssl rand -hex 16`), or unset it for a read-only console",
            token.len()
        );
        let secret: [u8; 32] = rand::random();
        let token = mac(&secret, "token", token.as_bytes());
        Ok(Self {
            secret,
            token,
            open: Mutex::default(),
        })
    }

    fn open_ids(&self) -> std::sync::MutexGuard<'_, VecDeque<String>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `given` is the operator's token, compared in constant time.
    pub(crate) fn token_is(&self, given: &str) -> bool {
        verify(&self.secret, "token", given.as_bytes(), &self.token)
    }

    /// A new session, and its `Set-Cookie` value: HttpOnly (no script reads it) and
    /// SameSite=Strict (no other site's page sends it).
    pub(crate) fn open(&self) -> (Session, String) {
        let id = hex::encode(rand::random::<[u8; 16]>());
        let signature = hex::encode(mac(&self.secret, "session", id.as_bytes()));
        let mut open = self.open_ids();
        if open.len() >= MOST_SESSIONS {
            open.pop_front();
        }
        open.push_back(id.clone());
        let cookie = format!("{COOKIE_NAME}={id}.{signature}; Path=/; HttpOnly; SameSite=Strict");
        (Session { id }, cookie)
    }

    /// Ends the session whose cookie `headers` carry, if any: its cookie and its CSRF token are
    /// refused from now on. The `Set-Cookie` value that clears the cookie in the browser.
    pub(crate) fn close(&self, headers: &HeaderMap) -> String {
        if let Some(session) = self.session(headers) {
            self.open_ids().retain(|id| *id != session.id);
        }
        format!("{COOKIE_NAME}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
    }

    /// The session whose cookie `headers` carry, if it was signed by this process and is still
    /// open.
    pub(crate) fn session(&self, headers: &HeaderMap) -> Option<Session> {
        let value = headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|line| line.split(';'))
            .find_map(|pair| pair.trim().strip_prefix(COOKIE_NAME)?.strip_prefix('='))?;
        let (id, signature) = value.split_once('.')?;
        let signature = hex::decode(signature).ok()?;
        let signed = verify(&self.secret, "session", id.as_bytes(), &signature);
        (signed && self.open_ids().iter().any(|open| open == id))
            .then(|| Session { id: id.to_owned() })
    }

    /// The seal on `what` an action did, for the browser that holds `session` when it comes
    /// back to the page (none: signed out, or never in). The page shows what was done only
    /// under a seal this process made for the session that asks: a link cannot make it say
    /// something, nor show one operator what another did.
    pub(crate) fn seal(&self, session: Option<&Session>, what: &str) -> String {
        hex::encode(mac(&self.secret, "done", &sealed(session, what)))
    }

    /// Whether `seal` is [`Sessions::seal`]'s for `what` and `session`, compared in constant
    /// time.
    pub(crate) fn is_sealed(&self, session: Option<&Session>, what: &str, seal: &str) -> bool {
        hex::decode(seal)
            .is_ok_and(|seal| verify(&self.secret, "done", &sealed(session, what), &seal))
    }

    /// The CSRF token `session`'s forms carry.
    pub(crate) fn csrf(&self, session: &Session) -> String {
        hex::encode(mac(&self.secret, "csrf", session.id.as_bytes()))
    }

    /// Whether `given` is `session`'s CSRF token, compared in constant time.
    pub(crate) fn csrf_is(&self, session: &Session, given: &str) -> bool {
        hex::decode(given)
            .is_ok_and(|given| verify(&self.secret, "csrf", session.id.as_bytes(), &given))
    }
}

/// What a seal signs: the session's id (empty for none) and what was done.
fn sealed(session: Option<&Session>, what: &str) -> Vec<u8> {
    let id = session.map_or("", |session| session.id.as_str());
    [id.as_bytes(), &[0], what.as_bytes()].concat()
}

/// Whether a request's `Origin` (or, without one, its `Referer`) names the host it was sent to:
/// a form posted from another site's page does not. A request with neither passes here; its
/// CSRF token still has to match.
pub(crate) fn same_origin(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let from = headers
        .get(ORIGIN)
        .or_else(|| headers.get(REFERER))
        .map(|value| value.to_str().unwrap_or_default());
    match from {
        None => true,
        Some(from) => url::Url::parse(from).is_ok_and(|url| {
            let authority = match (url.host_str(), url.port()) {
                (Some(name), Some(port)) => format!("{name}:{port}"),
                (Some(name), None) => name.to_owned(),
                (None, _) => return false,
            };
            authority.eq_ignore_ascii_case(host)
        }),
    }
}

/// HMAC-SHA-256 of `message` under `secret`, for one `purpose`, so that a value signed for
/// one purpose is never taken for another.
fn mac(secret: &[u8; 32], purpose: &str, message: &[u8]) -> [u8; 32] {
    keyed(secret, purpose, message)
        .finalize()
        .into_bytes()
        .into()
}

/// Whether `signature` is [`mac`]'s, compared in constant time.
fn verify(secret: &[u8; 32], purpose: &str, message: &[u8], signature: &[u8]) -> bool {
    keyed(secret, purpose, message)
        .verify_slice(signature)
        .is_ok()
}

fn keyed(secret: &[u8; 32], purpose: &str, message: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(purpose.as_bytes());
    mac.update(&[0]);
    mac.update(message);
    mac
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn cookie(set_cookie: &str) -> HeaderMap {
        let pair = set_cookie.split(';').next().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            COOKIE,
            HeaderValue::from_str(&format!("a=b; {pair}")).unwrap(),
        );
        headers
    }

    #[test]
    fn console_session_signed_here_is_taken_and_a_forged_one_is_not() {
        let sessions = Sessions::new("0123456789abcdef").unwrap();
        assert!(sessions.token_is("0123456789abcdef"));
        assert!(!sessions.token_is("0123456789abcdeF"));
        let session = sessions.session(&cookie(&sessions.open().1)).unwrap();
        let csrf = sessions.csrf(&session);
        assert!(sessions.csrf_is(&session, &csrf));
        assert!(!sessions.csrf_is(&session, ""));
        let other = Sessions::new("0123456789abcdef").unwrap();
        assert!(other.session(&cookie(&sessions.open().1)).is_none());
        assert!(
            sessions
                .session(&cookie("guestlist_console=00.00"))
                .is_none()
        );
        assert!(Sessions::new("short").is_err());
    }

    #[test]
    fn console_seal_holds_for_its_own_session_and_words_only() {
        let sessions = Sessions::new("0123456789abcdef").unwrap();
        let (session, _) = sessions.open();
        let seal = sessions.seal(Some(&session), "done=dropped&id=7");
        assert!(sessions.is_sealed(Some(&session), "done=dropped&id=7", &seal));
        assert!(!sessions.is_sealed(Some(&session), "done=dropped&id=8", &seal));
        assert!(!sessions.is_sealed(None, "done=dropped&id=7", &seal));
        let (other, _) = sessions.open();
        assert!(!sessions.is_sealed(Some(&other), "done=dropped&id=7", &seal));
        let signed_out = sessions.seal(None, "done=signed-out");
        assert!(sessions.is_sealed(None, "done=signed-out", &signed_out));
        assert!(!sessions.is_sealed(None, "done=signed-out", "00"));
    }

    #[test]
    fn console_session_closed_or_pushed_out_is_refused() {
        let sessions = Sessions::new("0123456789abcdef").unwrap();
        let (first, second) = (cookie(&sessions.open().1), cookie(&sessions.open().1));
        assert!(sessions.close(&first).contains("Max-Age=0"));
        assert!(sessions.session(&first).is_none(), "signed out");
        assert!(
            sessions.session(&second).is_some(),
            "the other session stays"
        );
        for _ in 0..MOST_SESSIONS {
            sessions.open();
        }
        assert!(sessions.session(&second).is_none(), "the oldest is closed");
        assert_eq!(sessions.open_ids().len(), MOST_SESSIONS);
    }

    #[test]
    fn console_origin_must_be_the_host_posted_to() {
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_static("127.0.0.1:8089"));
        assert!(same_origin(&headers));
        headers.insert(ORIGIN, HeaderValue::from_static("http://127.0.0.1:8089"));
        assert!(same_origin(&headers));
        headers.insert(ORIGIN, HeaderValue::from_static("http://evil.example"));
        assert!(!same_origin(&headers));
        headers.insert(ORIGIN, HeaderValue::from_static("null"));
        assert!(!same_origin(&headers));
    }
}
