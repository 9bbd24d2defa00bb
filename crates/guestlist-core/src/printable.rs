//! The one rule shared by handler names and message ids: 1 to 255 bytes of printable ASCII.

use crate::Error;

/// Longest id or name, in bytes; it fits a `VARCHAR(255)` key on every backend.
pub(crate) const MAX_LEN: usize = 255;

/// Checks `value` against the rule; `what` names the value in the error ("message id").
pub(crate) fn check(what: &'static str, value: &str) -> Result<(), Error> {
    if value.is_empty() {
        return Err(Error::Empty { what });
    }
    if value.len() > MAX_LEN {
        return Err(Error::TooLong {
            what,
            len: value.len(),
        });
    }
    if let Some((position, byte)) = value
        .bytes()
        .enumerate()
        .find(|(_, b)| !(0x20..=0x7e).contains(b))
    {
        return Err(Error::NotPrintableAscii {
            what,
            position,
            byte,
        });
    }
    Ok(())
}

/// Defines a validated string newtype: construction checks [`check`], and the usual conversions
/// (`FromStr`, `TryFrom<&str>`, `TryFrom<String>`, `Display`, `AsRef<str>`) go through it.
macro_rules! printable_newtype {
    ($(#[$meta:meta])* $name:ident, $what:literal) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            #[doc = concat!("Validates `value` as a ", $what, ": 1 to 255 bytes of printable ASCII.")]
            pub fn new(value: impl Into<String>) -> Result<Self, $crate::Error> {
                let value = value.into();
                $crate::printable::check($what, &value)?;
                Ok(Self(value))
            }

            #[doc = concat!("The ", $what, " as a string slice.")]
            pub fn as_str(&self) -> &str {
                &self.0
            }

            #[doc = concat!("The ", $what, " as an owned string.")]
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::Error;
            fn from_str(value: &str) -> Result<Self, Self::Err> {
                Self::new(value)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = $crate::Error;
            fn try_from(value: &str) -> Result<Self, Self::Error> {
                Self::new(value)
            }
        }

        impl TryFrom<String> for $name {
            type Error = $crate::Error;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                Self::new(value)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}
pub(crate) use printable_newtype;
