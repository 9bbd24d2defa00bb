//! The end of an attempt that answered: its response stored (committed with the handler's
//! writes, in transactional mode) and sent, or why it could not be.

use guestlist_core::{Completed, Fingerprint, StoredBody, StoredResponse};
use http::Response;

use crate::body::{self, Body, Captured};
use crate::bounds::{Handler, RequestBody, ResponseBody};
use crate::flow::{Flow, store_unavailable};
use crate::held::Held;
use crate::mode::Mode;
use crate::outcome::Outcome;
use crate::problem::Problem;

impl<S, M, ReqBody, ResBody> Flow<S, M, ReqBody, ResBody>
where
    S: Handler<ReqBody, ResBody>,
    M: Mode,
    ReqBody: RequestBody,
    ResBody: ResponseBody,
{
    /// Stores the handler's response (on its transaction, in transactional mode) and sends it.
    pub(crate) async fn store(
        self,
        held: Held<M>,
        response: Response<ResBody>,
        fingerprint: Fingerprint,
    ) -> Result<Response<Body>, S::Error> {
        let (parts, body) = response.into_parts();
        let captured = body::capture(body, self.config.max_stored_body).await;
        let stored_body = match &captured {
            Ok(Captured::Whole { bytes, .. }) => StoredBody::Bytes(bytes.to_vec()),
            Ok(Captured::TooLarge { .. }) => StoredBody::TooLarge,
            Err(err) if M::TRANSACTIONAL => {
                tracing::error!(error = %err, "the handler's response body failed; rolling back and releasing the key");
                held.release(&self.mode).await;
                return Ok(Problem::response_broken("the handler's response broke off; nothing was stored, so retry with the same key"
                        .to_owned(),
                )
                .into_response());
            }
            Err(err) => {
                // Plain mode: the handler's work happened and cannot be undone, so the key is not
                // released; a retry runs it again only once the lease ends.
                Outcome::KeptLocked.record();
                tracing::error!(error = %err, "the handler's response body failed; the key stays locked until the lease ends");
                return Ok(Problem::response_broken("the handler's response broke off after it ran; retry with the same key after the lease"
                        .to_owned(),
                )
                .into_response());
            }
        };
        let send = captured
            .map(Captured::into_body)
            .expect("errors returned above");
        let stored = StoredResponse {
            status: parts.status.as_u16(),
            headers: self
                .config
                .stored_headers
                .iter()
                .flat_map(|name| {
                    parts
                        .headers
                        .get_all(name)
                        .iter()
                        .map(move |value| (name.as_str().to_owned(), value.as_bytes().to_vec()))
                })
                .collect(),
            body: stored_body,
        };
        let takeover = held.attempt().is_takeover();
        let keyed = held.keyed().clone();
        match held.complete(&self.mode, &stored).await {
            Ok(Completed::Stored) => {
                // Stored for good (committed, in transactional mode): a retry may be answered
                // from memory from now on.
                self.config
                    .replay_cache
                    .remember(&keyed.scope, &keyed.key, &fingerprint, &stored);
                if takeover {
                    Outcome::LeaseTakeover.record();
                } else {
                    Outcome::Fresh.record();
                }
                Ok(Response::from_parts(parts, send))
            }
            Ok(Completed::Fenced) if M::TRANSACTIONAL => {
                Outcome::Fenced.record();
                tracing::warn!("this attempt's lease was taken over; its writes rolled back");
                Ok(Problem::attempt_superseded(
                    "this attempt ran past its lease and a retry with the same key took over; its \
                     writes were rolled back. Retry with the same key to get the result"
                        .to_owned(),
                )
                .into_response())
            }
            Ok(Completed::Fenced) => {
                Outcome::Fenced.record();
                tracing::warn!(
                    "this attempt's lease was taken over while it ran; its response was not stored"
                );
                Ok(Response::from_parts(parts, send))
            }
            Err(err) if M::TRANSACTIONAL => {
                Outcome::StoreError.record();
                tracing::error!(error = %err, "cannot store the response with the handler's writes");
                // Not released: if the commit went through, the retry replays it; if not, the
                // retry takes over once the lease ends.
                Ok(store_unavailable(&self.config))
            }
            Err(err) => {
                Outcome::StoreError.record();
                tracing::error!(error = %err, "the handler ran but its response could not be stored");
                Ok(Response::from_parts(parts, send))
            }
        }
    }
}
