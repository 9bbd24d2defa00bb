//! A duration serialized as whole milliseconds, for the read-models' JSON.

use std::time::Duration;

/// Serializes `duration` as its whole milliseconds.
pub(crate) fn serialize<S: serde::Serializer>(
    duration: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}
