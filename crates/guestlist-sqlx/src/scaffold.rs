//! What every type on a table repeats, written once: `Clone` with no bound on the backend, and
//! the constructors and `Debug` of a type on one table (the inbox, the outbox, the key store).

/// `Clone` for `$type<DB>`, field by field: `#[derive(Clone)]` would ask `DB: Clone`, which no
/// sqlx database type is.
macro_rules! clone_without_bound {
    ($type:ident<DB: $bound:path> { $($field:ident),* $(,)? }) => {
        impl<DB: $bound> Clone for $type<DB> {
            fn clone(&self) -> Self {
                Self {
                    $($field: Clone::clone(&self.$field),)*
                }
            }
        }
    };
}
pub(crate) use clone_without_bound;

/// `new` (the table `$default`), `with_table` (a table by name, refused unless it is a plain
/// identifier) and `Debug` (the backend and the table) for `$type<DB>`, which provides
/// `in_table(.., TableName)` and `table()`. `$held` names what the type holds from the start
/// (the key store: its pool), passed first to each constructor.
macro_rules! on_one_table {
    ($type:ident, $what:literal, $default:literal $(, $held:ident: $held_type:ty)?) => {
        impl<DB: $crate::backend::Backend> $type<DB> {
            #[doc = concat!($what, " in the table `", $default, "`.")]
            pub fn new($($held: $held_type)?) -> Self {
                let table = guestlist_core::TableName::new($default)
                    .expect("the default table name is valid");
                Self::in_table($($held,)? table)
            }

            #[doc = concat!($what, " in the table `name`, refused unless it is a plain identifier.")]
            pub fn with_table(
                $($held: $held_type,)?
                name: &str,
            ) -> Result<Self, guestlist_core::Error> {
                Ok(Self::in_table($($held,)? guestlist_core::TableName::new(name)?))
            }
        }

        impl<DB: $crate::backend::Backend> std::fmt::Debug for $type<DB> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($type))
                    .field("backend", &DB::BACKEND)
                    .field("table", &self.table().as_str())
                    .finish()
            }
        }
    };
}
pub(crate) use on_one_table;
