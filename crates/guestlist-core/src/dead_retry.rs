//! How a retried incoming dead letter finds its way back to the handler that gave up on it,
//! and only to it: two headers the retry carries, read by the consumer before its own
//! [`IdFrom`](https://docs.rs/guestlist-consumer) places.

use sha2::{Digest, Sha256};

/// The header naming the handler a retried dead letter is for. A consumer whose handler has
/// another name acknowledges the message without running (its inbox already handled, or never
/// wanted, the original).
pub const RETRY_FOR_HEADER: &str = "guestlist-retry-for";

/// The header carrying the id the handler's inbox claimed for the original, so that the retry
/// is claimed under the same id whatever the handler reads ids from (a broker's own id, which a
/// republished message does not keep, included).
pub const RETRY_OF_HEADER: &str = "guestlist-retry-of";

/// The broker's id for retry number `retry` (1, 2, …) of message `id` of `handler`: a repeat of
/// the same retry (a retrier that died before recording it) is dropped by the brokers that
/// deduplicate, while it never collides with the original's id or another retry's.
///
/// ```
/// use guestlist_core::retry_broker_id;
/// let first = retry_broker_id("warehouse", "evt_1", 1);
/// assert!(first.starts_with("gl-retry-1-"));
/// assert_eq!(first, retry_broker_id("warehouse", "evt_1", 1));
/// assert_ne!(first, retry_broker_id("warehouse", "evt_1", 2));
/// assert_ne!(first, retry_broker_id("billing", "evt_1", 1));
/// ```
pub fn retry_broker_id(handler: &str, id: &str, retry: u32) -> String {
    let digest = Sha256::new()
        .chain_update(handler.as_bytes())
        .chain_update([0])
        .chain_update(id.as_bytes())
        .finalize();
    format!("gl-retry-{retry}-{}", hex::encode(&digest[..20]))
}
