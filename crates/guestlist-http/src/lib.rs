//! Stripe-style `Idempotency-Key` for HTTP APIs, as a [tower] layer.
//!
//! A mobile app resubmits a payment because the response died in a tunnel; with
//! [`IdempotencyLayer`] the retry gets the first attempt's response instead of a second charge.
//! Status codes follow the IETF httpapi draft: 409 while the first attempt runs, 422 for a key
//! reused with another request, 400 for a malformed or missing key.
//!
//! In **transactional mode** the handler takes the request's database transaction with
//! [`IdempotentTx`], and the stored response commits with the handler's own writes: there is no
//! moment where the payment exists and its stored response does not.
//!
//! ```no_run
//! # #[cfg(all(feature = "postgres", feature = "axum"))]
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use axum::{Router, http::StatusCode, routing::post};
//! use guestlist_http::{IdempotencyLayer, IdempotentTx};
//! use guestlist_sqlx::SqlKeyStore;
//! use sqlx::Postgres;
//!
//! async fn create_payment(mut tx: IdempotentTx<Postgres>, body: String) -> (StatusCode, String) {
//!     sqlx::query("INSERT INTO payments (body) VALUES ($1)")
//!         .bind(&body)
//!         .execute(&mut *tx)
//!         .await
//!         .unwrap();
//!     (StatusCode::CREATED, "created".to_owned())
//! }
//!
//! let pool = sqlx::PgPool::connect("postgres://localhost/shop").await?;
//! let keys = SqlKeyStore::new(pool);
//! keys.migrate().await?;
//! let app: Router = Router::new()
//!     .route("/payments", post(create_payment))
//!     .layer(IdempotencyLayer::transactional(keys));
//! # Ok(()) }
//! ```
//!
//! [tower]: https://docs.rs/tower
//!
//! The guide tells the whole story, with each part's guarantees and failure tables: see
//! [Idempotency-Key for HTTP APIs](https://github.com/guestlist-rs/guestlist/blob/main/docs/guide/src/http.md)
//! (or build it locally with `mdbook serve docs/guide`).

mod attempts;
mod body;
mod bounds;
mod config;
mod context;
mod flow;
mod held;
mod keep_locked;
pub mod key_header;
mod key_source;
mod keyed_body;
mod layer;
mod mode;
mod outcome;
mod prefer;
mod problem;
mod quota;
#[cfg(feature = "sql")]
mod rejection;
mod replay;
mod replay_cache;
mod service;
#[cfg(feature = "sql")]
mod steps;
mod stored;
#[cfg(feature = "sql")]
mod transactional;
mod wait;
mod waiting;

pub use attempts::Attempts;
pub use body::{Body, BoxError};
pub use bounds::{Handler, RequestBody, ResponseBody};
pub use config::scope_of_credentials;
pub use context::IdempotencyContext;
pub use keep_locked::KeepLocked;
pub use key_source::KeySource;
pub use layer::IdempotencyLayer;
pub use mode::{Mode, Plain};
#[cfg(feature = "sql")]
pub use rejection::IdempotentTxRejection;
pub use replay_cache::ReplayCache;
pub use service::Idempotency;
#[cfg(feature = "sql")]
pub use steps::IdempotentSteps;
#[cfg(feature = "sql")]
pub use transactional::{IdempotentTx, Transactional, TxSlot};
