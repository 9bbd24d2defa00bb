//! Each gateway setting's text read into its value, with what to write instead when it is
//! not one.

use std::time::Duration;

use anyhow::{Context, bail};
use axum::http::{HeaderName, Method};
use guestlist::http::KeySource;

/// Whose key it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScopeFrom {
    /// A hash of the `Authorization` header (the layer's default).
    Authorization,
    /// The value of this header (a tenant or API-client id your edge sets).
    Header(HeaderName),
    /// One namespace for every client: a webhook endpoint with a single sender.
    None,
}

pub(crate) fn duration(name: &str, text: &str) -> anyhow::Result<Duration> {
    let value = humantime::parse_duration(text)
        .with_context(|| format!("--{name} {text:?} is not a duration like 30s, 5m or 24h"))?;
    anyhow::ensure!(!value.is_zero(), "--{name} must be longer than zero");
    Ok(value)
}

/// A duration that may be zero (a setting that zero turns off).
pub(crate) fn duration_or_zero(name: &str, text: &str) -> anyhow::Result<Duration> {
    humantime::parse_duration(text)
        .with_context(|| format!("--{name} {text:?} is not a duration like 0s, 2s or 1m"))
}

pub(crate) fn bytes(name: &str, text: &str) -> anyhow::Result<usize> {
    let size: bytesize::ByteSize = text.parse().map_err(|err| {
        anyhow::anyhow!("--{name} {text:?} is not a size like 1MiB or 64KiB: {err}")
    })?;
    usize::try_from(size.as_u64()).with_context(|| format!("--{name} {text:?} is too large"))
}

/// `header:NAME`, `json:/pointer` or `body-sha256`.
pub(crate) fn key_from(text: Option<&str>) -> anyhow::Result<KeySource> {
    let Some(text) = text else {
        return Ok(KeySource::default());
    };
    let refused = || {
        anyhow::anyhow!(
            "--key-from {text:?}: use header:NAME (header:Idempotency-Key, \
             header:X-GitHub-Delivery), json:/pointer (json:/id) or body-sha256"
        )
    };
    if text == "body-sha256" {
        return Ok(KeySource::BodySha256);
    }
    match text.split_once(':') {
        Some(("header", name)) => Ok(KeySource::Header(
            HeaderName::try_from(name).map_err(|_| refused())?,
        )),
        Some(("json", pointer)) if pointer.starts_with('/') => {
            Ok(KeySource::JsonPointer(pointer.to_owned()))
        }
        _ => Err(refused()),
    }
}

/// `authorization`, `header:NAME` or `none`.
pub(crate) fn scope_from(text: &str) -> anyhow::Result<ScopeFrom> {
    match text {
        "authorization" => Ok(ScopeFrom::Authorization),
        "none" => Ok(ScopeFrom::None),
        other => match other.split_once(':') {
            Some(("header", name)) if HeaderName::try_from(name).is_ok() => {
                Ok(ScopeFrom::Header(HeaderName::try_from(name)?))
            }
            _ => bail!("--scope-from {other:?}: use authorization, header:NAME or none"),
        },
    }
}

pub(crate) fn methods(text: &str) -> anyhow::Result<Vec<Method>> {
    text.split(',')
        .map(|m| m.trim().to_ascii_uppercase())
        .filter(|m| !m.is_empty())
        .map(|m| {
            Method::from_bytes(m.as_bytes())
                .with_context(|| format!("--methods: {m:?} is not a method"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_sources_parse() {
        assert_eq!(
            key_from(Some("body-sha256")).unwrap(),
            KeySource::BodySha256
        );
        assert_eq!(
            key_from(Some("header:X-GitHub-Delivery")).unwrap(),
            KeySource::Header(HeaderName::from_static("x-github-delivery"))
        );
        assert!(
            key_from(Some("json:id")).is_err(),
            "a pointer starts with /"
        );
    }
}
