//! Lingering close: the rest of a body the gateway answered early is read and discarded, so
//! that the client reads the answer instead of a reset.
//!
//! A request refused before its body was read (413 for a body over `--max-body`, 400 for a bad
//! key) is answered at once, and the connection would close while the client is still
//! uploading. The kernel answers the bytes that keep arriving with a reset, and a client that
//! uploads before it reads (Python's `requests`, curl without `Expect`) reports "connection
//! reset" and never sees the 413. Like nginx, the gateway reads what the client still sends, up
//! to [`DRAIN_BYTES`] and for at most [`DRAIN_TIME`], then lets the connection go; a body that
//! ends within those bounds leaves the connection open for the next request.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::header;
use http_body::{Frame, SizeHint};

/// At most this much of an unread body is read and discarded.
const DRAIN_BYTES: usize = 8 << 20;
/// For at most this long.
const DRAIN_TIME: Duration = Duration::from_secs(5);

/// Gives `request` a body that, dropped unread, drains what the client still sends.
pub(super) async fn linger(request: Request) -> Request {
    let expects_continue = request
        .headers()
        .get(header::EXPECT)
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    request.map(|body| {
        Body::new(Lingering {
            body: Some(body),
            polled: false,
            ended: false,
            expects_continue,
        })
    })
}

/// A request body that drains its rest when dropped unread.
struct Lingering {
    body: Option<Body>,
    /// Whether anyone asked for the body: until then a client that sent `Expect: 100-continue`
    /// has sent none of it.
    polled: bool,
    /// Read to its end, or broken off.
    ended: bool,
    expects_continue: bool,
}

impl HttpBody for Lingering {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        this.polled = true;
        let Some(body) = this.body.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = Pin::new(body).poll_frame(cx);
        if matches!(frame, Poll::Ready(None | Some(Err(_)))) {
            this.ended = true;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(body) = self.body.take() else {
            return;
        };
        if self.ended || body.is_end_stream() {
            return;
        }
        // Never asked for, from a client that waits for "100 Continue": none of it is coming,
        // and reading now would ask for it.
        if self.expects_continue && !self.polled {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(drain(body));
        }
    }
}

/// Reads and discards `body` until it ends, or [`DRAIN_BYTES`] or [`DRAIN_TIME`] run out.
async fn drain(mut body: Body) {
    let read = async {
        let mut left = DRAIN_BYTES;
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            let Ok(frame) = frame else {
                return; // the client went away
            };
            let read = frame.data_ref().map_or(0, Bytes::len);
            if read > left {
                tracing::debug!(
                    "an unread request body is longer than the gateway drains; closing"
                );
                return;
            }
            left -= read;
        }
    };
    if tokio::time::timeout(DRAIN_TIME, read).await.is_err() {
        tracing::debug!("an unread request body took longer than the gateway drains; closing");
    }
}
