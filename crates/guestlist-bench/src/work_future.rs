//! The future each backend's SQL in the benches returns, boxed so that one trait method can
//! stand for three databases.

use std::future::Future;
use std::pin::Pin;

/// A statement's future that borrows its connection for `'c`.
pub(crate) type WorkFuture<'c, T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'c>>;
