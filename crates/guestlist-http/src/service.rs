//! The service: the layer around a handler, handing each request to its [`Flow`].

use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::future::BoxFuture;
use http::{Request, Response};
use tower_service::Service;

use crate::body::Body;
use crate::bounds::{Handler, RequestBody, ResponseBody};
use crate::config::Config;
use crate::flow::Flow;
use crate::mode::Mode;

/// The service [`IdempotencyLayer`](crate::IdempotencyLayer) wraps around a handler.
#[derive(Debug, Clone)]
pub struct Idempotency<S, M> {
    pub(crate) inner: S,
    pub(crate) mode: M,
    pub(crate) config: Arc<Config>,
}

impl<S, M> Idempotency<S, M> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, M, ReqBody, ResBody> Service<Request<ReqBody>> for Idempotency<S, M>
where
    // The response named here too: it is what ties `ResBody` to `S`.
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Handler<ReqBody, ResBody> + Clone,
    M: Mode,
    ReqBody: RequestBody,
    ResBody: ResponseBody,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The ready service goes with this request; its clone waits for the next poll_ready.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let flow = Flow {
            inner,
            mode: self.mode.clone(),
            config: Arc::clone(&self.config),
            bodies: PhantomData,
        };
        Box::pin(flow.run(req))
    }
}
