//! Which table holds the guest list.

use crate::Error;

/// A table name checked to be a plain SQL identifier before it is ever formatted into SQL.
///
/// 1 to 48 ASCII letters, digits and underscores, starting with a letter or an underscore; the
/// limit leaves room for the names of the table's indexes within every backend's 63-byte limit.
/// Quotes, dots, spaces and dashes are refused, so the name needs no quoting anywhere.
///
/// ```
/// use guestlist_core::TableName;
/// assert_eq!(TableName::new("orders_inbox")?.as_str(), "orders_inbox");
/// assert!(TableName::new("inbox\"; DROP TABLE orders; --").is_err());
/// # Ok::<(), guestlist_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableName(String);

impl TableName {
    /// Longest accepted name, in bytes.
    pub const MAX_LEN: usize = 48;

    /// Validates `name` as a plain identifier.
    pub fn new(name: impl Into<String>) -> Result<Self, Error> {
        let name = name.into();
        let mut bytes = name.bytes();
        let first_ok = bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
        let rest_ok = bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if first_ok && rest_ok && name.len() <= Self::MAX_LEN {
            Ok(Self(name))
        } else {
            Err(Error::InvalidTableName { name })
        }
    }

    /// The name, safe to format into SQL unquoted.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for TableName {
    type Err = Error;
    fn from_str(name: &str) -> Result<Self, Error> {
        Self::new(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_anything_but_plain_identifiers() {
        for bad in [
            "",
            "1inbox",
            "in'box",
            "in\"box",
            "in`box",
            "public.inbox",
            "in box",
            "in-box",
            "inbox;",
            "ïnbox",
        ] {
            assert!(TableName::new(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(TableName::new("a".repeat(49)).is_err());
        assert!(TableName::new(format!("_{}", "a".repeat(47))).is_ok());
    }
}
