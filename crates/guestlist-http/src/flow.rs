//! One request's way through the layer: its key and scope, the claim, the handler's attempt,
//! and the stored response or the refusal it ends with.

use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use guestlist_core::{Fingerprint, KeyClaim};
use http::request::Parts;
use http::{HeaderValue, Request, Response};
use tracing::Instrument;

use crate::body::{self, Body};
use crate::bounds::{Handler, RequestBody, ResponseBody};
use crate::config::Config;
use crate::context::IdempotencyContext;
use crate::held::{Held, Keyed, NotRun};
use crate::keep_locked::KeepLocked;
use crate::key_header::KeyHeader;
use crate::key_source::{self, KeySource};
use crate::keyed_body;
use crate::mode::Mode;
use crate::outcome::Outcome;
use crate::prefer;
use crate::problem::Problem;
use crate::quota::over_quota;
use crate::replay::replay;
use crate::wait::wait_for_answer;

/// One request's way through the layer.
pub(crate) struct Flow<S, M, ReqBody, ResBody> {
    pub(crate) inner: S,
    pub(crate) mode: M,
    pub(crate) config: Arc<Config>,
    pub(crate) bodies: PhantomData<fn(ReqBody) -> ResBody>,
}

/// A keyed request's body: already read (its key was in it), or still to read.
enum Pending<B> {
    Read(Bytes),
    Unread(B),
}

impl<S, M, ReqBody, ResBody> Flow<S, M, ReqBody, ResBody>
where
    S: Handler<ReqBody, ResBody>,
    M: Mode,
    ReqBody: RequestBody,
    ResBody: ResponseBody,
{
    pub(crate) async fn run(self, req: Request<ReqBody>) -> Result<Response<Body>, S::Error> {
        if !self.config.methods.contains(req.method()) {
            return self.unkeyed(req).await;
        }
        let (parts, body) = req.into_parts();
        // A key in a header is known before the body: a bad one is refused without reading it.
        let (key, body) = if self.config.key.in_body() {
            let bytes = match keyed_body::read(self.config.max_request_body, &parts, body).await {
                Ok(bytes) => bytes,
                Err(refusal) => return Ok(refuse(refusal)),
            };
            (
                self.config.key.read(&parts.headers, &bytes),
                Pending::Read(bytes),
            )
        } else {
            (
                self.config.key.read(&parts.headers, &[]),
                Pending::Unread(body),
            )
        };
        let key = match key {
            KeyHeader::Key(key) => key,
            KeyHeader::Missing if !self.config.require_key => {
                let body = match body {
                    Pending::Read(bytes) => ReqBody::from(bytes),
                    Pending::Unread(body) => body,
                };
                return self.unkeyed(Request::from_parts(parts, body)).await;
            }
            KeyHeader::Missing => {
                return Ok(refuse(Problem::key_required(format!(
                    "this endpoint needs an idempotency key so that a retry cannot run twice: {}",
                    self.config.key.how_to_send()
                ))));
            }
            KeyHeader::Malformed(why) => {
                let how = match &self.config.key {
                    KeySource::Header(name) => format!(
                        "send {} as 1 to 255 printable ASCII characters, bare or as a quoted string",
                        key_source::title(name)
                    ),
                    other => other.how_to_send(),
                };
                return Ok(refuse(Problem::key_malformed(format!("{why}; {how}"))));
            }
        };
        let Some(scope) = (self.config.scope)(&parts) else {
            return Ok(refuse(Problem::no_scope(format!(
                "{}; nothing was run",
                self.config.scope_hint
            ))));
        };
        let span = tracing::info_span!(
            "guestlist.idempotency",
            // OpenTelemetry's HTTP conventions name a span by its method and route; a layer
            // outside the router knows no route, and a path holds ids: the method alone.
            otel.name = %parts.method,
            otel.kind = "server",
            http.request.method = %parts.method,
            url.path = parts.uri.path(),
            guestlist.key = key.as_str(),
            guestlist.scope_hash = scope.digest(),
            guestlist.attempt = tracing::field::Empty,
            guestlist.outcome = tracing::field::Empty,
        );
        // The caller's trace, when its request carries one: this span is its child.
        guestlist_core::trace_context::adopt(&span, |name| {
            let value = parts.headers.get(name)?.to_str().ok()?;
            Some(value.to_owned())
        });
        self.keyed(parts, body, Keyed { scope, key })
            .instrument(span)
            .await
    }

    /// A request without a key: the handler runs (transactional mode still gives it a
    /// transaction), nothing is stored.
    async fn unkeyed(mut self, req: Request<ReqBody>) -> Result<Response<Body>, S::Error> {
        let (mut parts, body) = req.into_parts();
        let slot = self.mode.open(&mut parts.extensions);
        let response = self.inner.call(Request::from_parts(parts, body)).await;
        let keep = response
            .as_ref()
            .is_ok_and(|r| !(self.config.release_when)(r.status()));
        if let Err(err) = self.mode.finish(slot, keep).await {
            tracing::error!(error = %err, "cannot end the handler's transaction");
            return Ok(store_unavailable(&self.config));
        }
        response.map(|r| r.map(body::boxed))
    }

    async fn keyed(
        self,
        parts: Parts,
        body: Pending<ReqBody>,
        keyed: Keyed,
    ) -> Result<Response<Body>, S::Error> {
        let bytes = match body {
            Pending::Read(bytes) => bytes,
            Pending::Unread(body) => {
                match keyed_body::read(self.config.max_request_body, &parts, body).await {
                    Ok(bytes) => bytes,
                    Err(refusal) => return Ok(refuse(refusal)),
                }
            }
        };
        // From here on the request is accepted: the claim, the attempt and the stored answer (or
        // the release) run to their end on a task of their own. A client that hangs up (the
        // response died in a tunnel) drops only the wait for it; were the claim cancelled after
        // its commit, or the handler halfway, the key would stay locked for the whole lease
        // instead of holding the answer its retry should get.
        let span = tracing::Span::current();
        let running = self.config.attempts.enter();
        // Dropped with this future: a request waiting for its key's first attempt stops waiting
        // when its client hangs up.
        let (_connected, hung_up) = tokio::sync::oneshot::channel::<()>();
        let accepted = tokio::spawn(
            async move {
                let _running = running;
                self.claim_and_attempt(parts, bytes, keyed, hung_up).await
            }
            .instrument(span),
        );
        match accepted.await {
            Ok(response) => response,
            Err(panicked) => {
                tracing::error!(error = %panicked, "the handler panicked; its key stays locked until the lease ends (with the claim on its transaction, it is free now)");
                Ok(Problem::handler_panicked("the server failed while handling this request; retry with the same key (while it \
                     stays locked you get 409 with Retry-After)"
                        .to_owned(),
                )
                .into_response())
            }
        }
    }

    /// Claims the key (waiting for the first attempt's answer while it is in flight, where the
    /// layer waits), then runs the attempt that holds it, or answers why it did not run.
    async fn claim_and_attempt(
        self,
        mut parts: Parts,
        bytes: Bytes,
        keyed: Keyed,
        mut hung_up: tokio::sync::oneshot::Receiver<()>,
    ) -> Result<Response<Body>, S::Error> {
        let fingerprint = self.fingerprint(&parts, &bytes);
        let cache = &self.config.replay_cache;
        if let Some(remembered) = cache.answer(&keyed.scope, &keyed.key, &fingerprint) {
            return Ok(self.not_run(Ok(remembered)));
        }
        let slot = self.mode.open(&mut parts.extensions);
        let lease = self.config.lease;
        let (claimed, applied) =
            match Held::claim(&self.mode, slot, keyed.clone(), &fingerprint, lease).await {
                Err(Ok(KeyClaim::InFlight { retry_after })) => {
                    let waited = wait_for_answer(
                        &self.mode,
                        &self.config,
                        &mut parts,
                        &keyed,
                        &fingerprint,
                        retry_after,
                        &mut hung_up,
                    )
                    .await;
                    (waited.claimed, waited.applied)
                }
                claimed => (claimed, None),
            };
        let response = match claimed {
            Ok(held) => self.run_held(parts, bytes, held, fingerprint).await,
            Err(not_run) => {
                if let Ok(KeyClaim::Replay(stored)) = &not_run {
                    cache.remember(&keyed.scope, &keyed.key, &fingerprint, stored);
                }
                Ok(self.not_run(not_run))
            }
        };
        // The wait the client asked for, as honoured.
        response.map(|mut response| {
            if let Some(applied) = applied {
                response
                    .headers_mut()
                    .insert(prefer::PREFERENCE_APPLIED, prefer::wait_applied(applied));
            }
            response
        })
    }

    /// Runs the attempt that holds the key, once its scope is within its caps.
    async fn run_held(
        self,
        parts: Parts,
        bytes: Bytes,
        held: Held<M>,
        fingerprint: Fingerprint,
    ) -> Result<Response<Body>, S::Error> {
        let held = if self.config.in_flight_wait.is_zero() {
            held
        } else {
            let keyed = held.keyed();
            let wake = self.config.waiting.wake_on_drop(&keyed.scope, &keyed.key);
            held.waking(wake)
        };
        tracing::Span::current().record("guestlist.attempt", held.attempt().number());
        if let Some(refusal) = over_quota(&self.mode, &self.config, &held.keyed().scope).await {
            held.give_back(&self.mode).await;
            return Ok(refusal);
        }
        self.attempt(parts, bytes, held, fingerprint).await
    }

    /// The answer to a request whose claim did not let it run: a replay, 409, 422, or 503.
    fn not_run(&self, begin: NotRun) -> Response<Body> {
        match begin {
            Ok(KeyClaim::Run { .. }) => unreachable!("a claim that runs is no refusal"),
            Ok(KeyClaim::Replay(stored)) => {
                Outcome::Replayed.record();
                replay(stored, self.config.max_stored_body)
            }
            Ok(KeyClaim::InFlight { retry_after }) => {
                Outcome::ConflictInFlight.record();
                let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
                Problem::key_in_flight(format!(
                    "the first request with this key has not finished; retry with the same key \
                         after {seconds}s to get its result"
                ))
                .retry_after(seconds)
                .into_response()
            }
            Ok(KeyClaim::Mismatch) => {
                Outcome::FingerprintMismatch.record();
                let name = self.config.key.describe();
                Problem::key_reused(
                    self.config.mismatch_status,
                    format!(
                        "this key ({name}) was first sent with a different method, path, query or body; \
                         use a new key for a new request, or resend the original request exactly"
                    ),
                )
                .into_response()
            }
            Err(err) => {
                Outcome::StoreError.record();
                tracing::error!(error = %err, "the key store failed before the handler ran");
                store_unavailable(&self.config)
            }
        }
    }

    /// The attempt that holds the key: the handler, then the stored response or the release.
    async fn attempt(
        mut self,
        mut parts: Parts,
        bytes: Bytes,
        held: Held<M>,
        fingerprint: Fingerprint,
    ) -> Result<Response<Body>, S::Error> {
        let keyed = held.keyed();
        parts.extensions.insert(IdempotencyContext {
            scope: keyed.scope.clone(),
            key: keyed.key.clone(),
            attempt: held.attempt(),
        });
        // Outbound calls the handler makes derive their keys from this client's key.
        let parent = keyed.scope.qualify(&keyed.key);
        let call = self
            .inner
            .call(Request::from_parts(parts, ReqBody::from(bytes)));
        let response = match guestlist_carry::scope(parent, call).await {
            Ok(response) => response,
            Err(err) => {
                held.release(&self.mode).await;
                return Err(err);
            }
        };
        if response.extensions().get::<KeepLocked>().is_some() {
            // The work may have happened: neither stored nor released, the key stays locked
            // until its lease ends and a retry takes over.
            Outcome::KeptLocked.record();
            tracing::warn!(
                "the handler cannot tell whether its work happened; the key stays locked until the lease ends"
            );
            held.keep_locked(&self.mode).await;
            return Ok(response.map(body::boxed));
        }
        let release = response
            .extensions()
            .get::<crate::keep_locked::ReleaseKey>();
        if (self.config.release_when)(response.status()) || release.is_some() {
            held.release(&self.mode).await;
            return Ok(response.map(body::boxed));
        }
        self.store(held, response, fingerprint).await
    }

    fn fingerprint(&self, parts: &Parts, body: &[u8]) -> Fingerprint {
        let path_and_query = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
        let mut builder = Fingerprint::builder(parts.method.as_str(), path_and_query);
        for name in &self.config.fingerprint_headers {
            builder = builder.header(
                name.as_str(),
                parts.headers.get(name).map(HeaderValue::as_bytes),
            );
        }
        builder.body(body)
    }
}

/// A refusal before the key was looked up: nothing stored.
pub(crate) fn refuse(problem: Problem) -> Response<Body> {
    Outcome::Refused.record();
    problem.into_response()
}

/// 503: the key store failed; the client retries with the same key.
pub(crate) fn store_unavailable(config: &Config) -> Response<Body> {
    let seconds = config.lease.as_secs().max(1);
    Problem::store_unavailable(format!(
        "the server could not record this request; retry with the same key after {seconds}s"
    ))
    .retry_after(seconds)
    .into_response()
}
