//! A request's body, read whole before an action sees it. The console's forms are small; a
//! larger body is still read to its end (up to a bound) and then answered 413, so that a client
//! that sends all of it before reading gets the answer, not a broken pipe.

use axum::body::Body;
use axum::extract::Request;
use axum::http::header::{CONNECTION, CONTENT_LENGTH};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use http_body_util::BodyExt;

use super::actions::refused;

/// The largest body an action takes: its form's fields are an id, a key, a token.
const MOST: u64 = 64 * 1024;
/// The most read of a body past [`MOST`] before the answer, so that the client is not cut off
/// mid-send; past it the connection is closed.
const DRAIN: u64 = 64 * 1024 * 1024;

/// `request` with its body read whole, or the refusal of a body over [`MOST`] (413).
pub(crate) async fn read_whole(request: Request) -> Result<Request, Response> {
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if let Some(length) = declared.filter(|length| *length > DRAIN) {
        return Err(too_large(length, true));
    }
    let (parts, mut body) = request.into_parts();
    let mut kept = Vec::new();
    let mut total: u64 = 0;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return Err(refused(
                StatusCode::BAD_REQUEST,
                "the request's body broke off before its end: nothing was done, send it again",
            ));
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total += data.len() as u64;
        if total <= MOST {
            kept.extend_from_slice(&data);
        } else if total > DRAIN {
            return Err(too_large(total, true));
        }
    }
    if total > MOST {
        return Err(too_large(total, false));
    }
    Ok(Request::from_parts(parts, Body::from(kept)))
}

/// 413 for a body of `bytes`; the connection closed after it where the body was not read to
/// its end.
fn too_large(bytes: u64, close: bool) -> Response {
    let message = format!(
        "a console form is at most {} KiB, and this request's body is {} KiB or more: nothing \
         was done. Send the form from the console's own page",
        MOST / 1024,
        bytes / 1024
    );
    let mut response = refused(StatusCode::PAYLOAD_TOO_LARGE, &message);
    if close {
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}
