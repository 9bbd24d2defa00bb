//! The one name for "any error, boxed".

/// Any error, boxed, as it crosses a boundary that cannot name its type: a broker client's
/// failure, a response body's, a publisher's. `?` turns every `std::error::Error + Send + Sync`
/// into it; `anyhow::Error::from_boxed` makes an `anyhow::Error` of it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
