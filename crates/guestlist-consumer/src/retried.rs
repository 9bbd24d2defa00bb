//! A retried dead letter, as a consumer sees it arrive: published again by `guestlist inbox
//! dead retry` (or [`Inbox::retry_dead`](guestlist_sqlx::Inbox)) for one handler, under the id
//! that handler's inbox claims.

use guestlist_core::{HandlerName, MessageId, RETRY_FOR_HEADER, RETRY_OF_HEADER};

use crate::Delivery;

/// Whom a delivery is for.
pub(crate) enum Addressed {
    /// An ordinary message: its id comes from the consumer's [`IdFrom`](crate::IdFrom).
    Anyone,
    /// A retry of another handler's dead letter: acknowledged here without running.
    Another,
    /// A retry of this handler's dead letter, claimed under the id its inbox gave the original.
    This(MessageId),
    /// A retry for this handler whose id is not valid: why.
    Invalid(String),
}

/// Whom `delivery` is for, seen from the handler `name`.
pub(crate) fn addressed<D: Delivery>(delivery: &D, name: &HandlerName) -> Addressed {
    let Some(handler) = delivery.header(RETRY_FOR_HEADER) else {
        return Addressed::Anyone;
    };
    if handler != name.as_str() {
        return Addressed::Another;
    }
    match delivery.header(RETRY_OF_HEADER).map(MessageId::new) {
        Some(Ok(id)) => Addressed::This(id),
        Some(Err(err)) => Addressed::Invalid(format!("the retry's {RETRY_OF_HEADER}: {err}")),
        None => Addressed::Invalid(format!(
            "a retry for this handler without its {RETRY_OF_HEADER} header"
        )),
    }
}
