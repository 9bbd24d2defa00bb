//! A statement as one typed value: the text it runs and the values it binds, in order, so the
//! code that runs it is written once for every database.
//!
//! sqlx binds and reads a value only where the compiler can see that the database encodes its
//! type, which generic code can say only with a bound per type at every function. [`Codec`] says
//! it once: each database implements its few methods on its concrete types, and generic code
//! binds with [`Args::arg`] and reads with [`Codec::get`] under the bound `DB: Codec` alone.

// Named by the sealed traits, so `pub`; unreachable outside the crate.
#![allow(unreachable_pub)]

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use sqlx::Database;
use sqlx::query::Query;

/// A query with its values bound so far.
pub type Bound<'q, DB> = Query<'q, DB, <DB as Database>::Arguments>;

/// One statement: which text of a table's SQL it runs, and its values in the order the text
/// names them.
pub trait Statement: Send {
    /// Where the statement's text is: the SQL formatted for one table.
    type Sql: Sync;
    /// What one row it returns reads as (`()` for a statement that returns none).
    type Row: Columns;

    /// The statement's text in `sql`.
    fn text<'s>(&self, sql: &'s Self::Sql) -> &'s Arc<str>;

    /// Binds the statement's values onto `query`, in order.
    fn bind<'q, DB: Codec>(self, query: Bound<'q, DB>) -> Bound<'q, DB>;

    /// The statement's query: its text in `sql`, prepared, with its values bound.
    fn query<'q, DB: Codec>(self, sql: &Self::Sql) -> Bound<'q, DB>
    where
        Self: Sized,
    {
        let text = self.text(sql);
        self.bind(prepared(text))
    }
}

/// A value a statement binds: the few types guestlist's tables hold.
pub trait Value: Send {
    /// Binds `self` onto `query`.
    fn bind<'q, DB: Codec>(self, query: Bound<'q, DB>) -> Bound<'q, DB>;
}

/// A column a statement reads back.
pub trait Column: Sized + Send {
    /// Reads column `index` of `row`.
    fn get<DB: Codec>(row: &DB::Row, index: usize) -> Result<Self, sqlx::Error>;
}

/// A row a statement reads back, column by column.
pub trait Columns: Sized + Send {
    /// Reads `row`.
    fn read<DB: Codec>(row: &DB::Row) -> Result<Self, sqlx::Error>;
}

/// Implements [`Columns`] for tuples of [`Column`]s, read in order.
macro_rules! columns {
    ($(($($ty:ident $index:tt),*)),* $(,)?) => {$(
        impl<$($ty: Column),*> Columns for ($($ty,)*) {
            #[allow(unused_variables)] // the empty tuple reads nothing
            fn read<DB: Codec>(row: &DB::Row) -> Result<Self, sqlx::Error> {
                Ok(($(DB::get::<$ty>(row, $index)?,)*))
            }
        }
    )*};
}

columns!((), (A 0), (A 0, B 1), (A 0, B 1, C 2), (A 0, B 1, C 2, D 3),
    (A 0, B 1, C 2, D 3, E 4), (A 0, B 1, C 2, D 3, E 4, F 5, G 6),
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7),
    (A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8));

/// Declares a row a statement reads back: a struct whose fields are its columns, read in the
/// order the fields are declared, which is the order the statement's `SELECT` names them.
macro_rules! row {
    ($(#[$meta:meta])* $vis:vis struct $name:ident {
        $($(#[$field_meta:meta])* $field:ident: $ty:ty),+ $(,)?
    }) => {
        $(#[$meta])*
        $vis struct $name {
            $($(#[$field_meta])* pub(crate) $field: $ty),+
        }

        impl $crate::backend::statement::Columns for $name {
            fn read<DB: $crate::backend::statement::Codec>(
                row: &DB::Row,
            ) -> Result<Self, sqlx::Error> {
                // A struct expression's fields are evaluated in the order written.
                let mut column = 0..;
                Ok(Self {
                    $($field: DB::get(row, column.next().unwrap_or_default())?),+
                })
            }
        }
    };
}

pub(crate) use row;

/// Binds a [`Value`] onto a query, as sqlx's `bind` does for a concrete database.
pub trait Args {
    /// `self` with `value` bound next.
    fn arg(self, value: impl Value) -> Self;
}

impl<DB: Codec> Args for Bound<'_, DB> {
    fn arg(self, value: impl Value) -> Self {
        value.bind(self)
    }
}

/// Implements [`Value`] for a type through the [`Codec`] method that binds it.
macro_rules! value {
    ($($ty:ty => $bind:ident),* $(,)?) => {$(
        impl Value for $ty {
            fn bind<'q, DB: Codec>(self, query: Bound<'q, DB>) -> Bound<'q, DB> {
                DB::$bind(query, self)
            }
        }
    )*};
}

value!(i64 => bind_i64, Option<i64> => bind_opt_i64, i32 => bind_i32, &str => bind_str,
    Option<&str> => bind_opt_str, &[u8] => bind_bytes, Option<&[u8]> => bind_opt_bytes);

/// Values bound in order: a tuple of [`Value`]s.
pub trait Values: Send {
    /// Binds each value onto `query`, in order.
    fn bind<'q, DB: Codec>(self, query: Bound<'q, DB>) -> Bound<'q, DB>;
}

/// Implements [`Values`] for tuples of [`Value`]s.
macro_rules! values {
    ($(($($ty:ident $index:tt),*)),* $(,)?) => {$(
        impl<$($ty: Value),*> Values for ($($ty,)*) {
            #[allow(unused_variables)] // the empty tuple binds nothing
            fn bind<'q, DB: Codec>(self, query: Bound<'q, DB>) -> Bound<'q, DB> {
                $(let query = self.$index.bind(query);)*
                query
            }
        }
    )*};
}

values!((), (A 0), (A 0, B 1), (A 0, B 1, C 2), (A 0, B 1, C 2, D 3),
    (A 0, B 1, C 2, D 3, E 4));

/// A statement given by where its text is and the values it binds, for those whose values
/// need no names: `Plain::new(|sql: &RelaySql| &sql.release, (token,))`.
pub struct Plain<S, V, R = ()> {
    text: fn(&S) -> &Arc<str>,
    values: V,
    row: PhantomData<fn() -> R>,
}

impl<S, V> Plain<S, V> {
    /// The statement at `text` binding `values`, whose rows are not read.
    pub(crate) fn new(text: fn(&S) -> &Arc<str>, values: V) -> Self {
        Self::reading(text, values)
    }
}

impl<S, V, R> Plain<S, V, R> {
    /// The statement at `text` binding `values`, whose rows read as `R`.
    pub(crate) fn reading(text: fn(&S) -> &Arc<str>, values: V) -> Self {
        Self {
            text,
            values,
            row: PhantomData,
        }
    }
}

impl<S: Sync, V: Values, R: Columns> Statement for Plain<S, V, R> {
    type Sql = S;
    type Row = R;
    fn text<'s>(&self, sql: &'s S) -> &'s Arc<str> {
        (self.text)(sql)
    }
    fn bind<'q, DB: Codec>(self, query: Bound<'q, DB>) -> Bound<'q, DB> {
        self.values.bind(query)
    }
}

/// Implements [`Column`] for a type through the [`Codec`] method that reads it.
macro_rules! column {
    ($($ty:ty => $get:ident),* $(,)?) => {$(
        impl Column for $ty {
            fn get<DB: Codec>(row: &DB::Row, index: usize) -> Result<Self, sqlx::Error> {
                DB::$get(row, index)
            }
        }
    )*};
}

column!(i64 => get_i64, Option<i64> => get_opt_i64, Option<i32> => get_opt_i32,
    Vec<u8> => get_bytes, Option<Vec<u8>> => get_opt_bytes, String => get_string,
    Option<String> => get_opt_string, bool => get_bool);

/// What a database binds, reads and runs, on its concrete types: the one place the bounds sqlx
/// needs are met, so that statements run generically. Sealed: implemented by `backend!`.
pub trait Codec: Database + sqlx::database::HasStatementCache {
    /// Binds an integer.
    fn bind_i64<'q>(query: Bound<'q, Self>, value: i64) -> Bound<'q, Self>;
    /// Binds an integer or `NULL`.
    fn bind_opt_i64<'q>(query: Bound<'q, Self>, value: Option<i64>) -> Bound<'q, Self>;
    /// Binds a small integer (an HTTP status).
    fn bind_i32<'q>(query: Bound<'q, Self>, value: i32) -> Bound<'q, Self>;
    /// Binds text or `NULL`.
    fn bind_opt_str<'q>(query: Bound<'q, Self>, value: Option<&str>) -> Bound<'q, Self>;
    /// Binds text.
    fn bind_str<'q>(query: Bound<'q, Self>, value: &str) -> Bound<'q, Self>;
    /// Binds bytes.
    fn bind_bytes<'q>(query: Bound<'q, Self>, value: &[u8]) -> Bound<'q, Self>;
    /// Binds bytes or `NULL`.
    fn bind_opt_bytes<'q>(query: Bound<'q, Self>, value: Option<&[u8]>) -> Bound<'q, Self>;

    /// Reads an integer.
    fn get_i64(row: &Self::Row, index: usize) -> Result<i64, sqlx::Error>;
    /// Reads an integer or `NULL`.
    fn get_opt_i64(row: &Self::Row, index: usize) -> Result<Option<i64>, sqlx::Error>;
    /// Reads a small integer or `NULL`.
    fn get_opt_i32(row: &Self::Row, index: usize) -> Result<Option<i32>, sqlx::Error>;
    /// Reads bytes.
    fn get_bytes(row: &Self::Row, index: usize) -> Result<Vec<u8>, sqlx::Error>;
    /// Reads bytes or `NULL`.
    fn get_opt_bytes(row: &Self::Row, index: usize) -> Result<Option<Vec<u8>>, sqlx::Error>;
    /// Reads a boolean.
    fn get_bool(row: &Self::Row, index: usize) -> Result<bool, sqlx::Error>;
    /// Reads text or `NULL`.
    fn get_opt_string(row: &Self::Row, index: usize) -> Result<Option<String>, sqlx::Error>;
    /// Reads text.
    fn get_string(row: &Self::Row, index: usize) -> Result<String, sqlx::Error>;

    /// Runs `query`; the rows it changed.
    fn run_query<'c>(
        conn: &'c mut Self::Connection,
        query: Bound<'c, Self>,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'c;

    /// Runs `query`; its first row, if any (the database is told one row is wanted).
    fn fetch_optional_query<'c>(
        conn: &'c mut Self::Connection,
        query: Bound<'c, Self>,
    ) -> impl Future<Output = Result<Option<Self::Row>, sqlx::Error>> + Send + 'c;

    /// Runs `query`; every row it returns.
    fn fetch_query<'c>(
        conn: &'c mut Self::Connection,
        query: Bound<'c, Self>,
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send + 'c;

    /// Reads column `index` of `row`.
    fn get<T: Column>(row: &Self::Row, index: usize) -> Result<T, sqlx::Error> {
        T::get::<Self>(row, index)
    }

    /// Runs `statement` with the text in `sql`; the rows it changed.
    fn run<'c, S: Statement>(
        conn: &'c mut Self::Connection,
        sql: &S::Sql,
        statement: S,
    ) -> Pending<'c, u64> {
        Box::pin(Self::run_query(conn, statement.query(sql)))
    }

    /// Runs `statement` with the text in `sql`; every row it returns.
    fn fetch<'c, S: Statement>(
        conn: &'c mut Self::Connection,
        sql: &S::Sql,
        statement: S,
    ) -> Pending<'c, Vec<S::Row>>
    where
        S::Row: 'c,
    {
        let rows = Self::fetch_query(conn, statement.query(sql));
        Box::pin(async move { rows.await?.iter().map(S::Row::read::<Self>).collect() })
    }

    /// Runs `statement` with the text in `sql`; the first row it returns, if any.
    fn fetch_first<'c, S: Statement>(
        conn: &'c mut Self::Connection,
        sql: &S::Sql,
        statement: S,
    ) -> Pending<'c, Option<S::Row>>
    where
        S::Row: 'c,
    {
        let row = Self::fetch_optional_query(conn, statement.query(sql));
        Box::pin(async move { row.await?.as_ref().map(S::Row::read::<Self>).transpose() })
    }

    /// Runs `statement` with the text in `sql`; the row it returns, which must be there (an
    /// aggregate's).
    fn fetch_one<'c, S: Statement>(
        conn: &'c mut Self::Connection,
        sql: &S::Sql,
        statement: S,
    ) -> Pending<'c, S::Row>
    where
        S::Row: 'c,
    {
        let row = Self::fetch_first(conn, sql, statement);
        Box::pin(async move { row.await?.ok_or(sqlx::Error::RowNotFound) })
    }
}

/// A statement's run, boxed: its type names neither the statement nor its borrows, so the
/// futures that await it stay `Send` for every lifetime (a generic future would not).
pub type Pending<'c, T> = Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'c>>;

/// A query of a table's formatted text, kept as a prepared statement.
pub(crate) fn prepared<'q, DB: Database>(text: &Arc<str>) -> Bound<'q, DB> {
    sqlx::query(sqlx::AssertSqlSafe(text.clone()))
}

/// Implements [`Codec`] for a database on its concrete types.
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
macro_rules! codec {
    ($db:ty) => {
        impl $crate::backend::statement::Codec for $db {
            $crate::backend::statement::binds!(bind_i64: i64, bind_opt_i64: Option<i64>,
                bind_i32: i32, bind_str: &str,
                bind_opt_str: Option<&str>, bind_bytes: &[u8],
                bind_opt_bytes: Option<&[u8]>);
            $crate::backend::statement::gets!(get_i64: i64, get_opt_i64: Option<i64>,
                get_opt_i32: Option<i32>, get_bytes: Vec<u8>, get_opt_bytes: Option<Vec<u8>>,
                get_string: String, get_opt_string: Option<String>, get_bool: bool);

            async fn run_query<'c>(
                conn: &'c mut Self::Connection,
                query: $crate::backend::statement::Bound<'c, Self>,
            ) -> Result<u64, sqlx::Error> {
                Ok(query.execute(conn).await?.rows_affected())
            }

            async fn fetch_optional_query<'c>(
                conn: &'c mut Self::Connection,
                query: $crate::backend::statement::Bound<'c, Self>,
            ) -> Result<Option<Self::Row>, sqlx::Error> {
                query.fetch_optional(conn).await
            }

            async fn fetch_query<'c>(
                conn: &'c mut Self::Connection,
                query: $crate::backend::statement::Bound<'c, Self>,
            ) -> Result<Vec<Self::Row>, sqlx::Error> {
                query.fetch_all(conn).await
            }
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
pub(crate) use codec;

/// [`Codec`]'s binds, each sqlx's `bind` on the concrete database.
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
macro_rules! binds {
    ($($name:ident: $ty:ty),* $(,)?) => {$(
        fn $name<'q>(
            query: $crate::backend::statement::Bound<'q, Self>,
            value: $ty,
        ) -> $crate::backend::statement::Bound<'q, Self> {
            query.bind(value)
        }
    )*};
}
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
pub(crate) use binds;

/// [`Codec`]'s reads, each sqlx's `try_get` on the concrete database.
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
macro_rules! gets {
    ($($name:ident: $ty:ty),* $(,)?) => {$(
        fn $name(row: &Self::Row, index: usize) -> Result<$ty, sqlx::Error> {
            sqlx::Row::try_get(row, index)
        }
    )*};
}
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
pub(crate) use gets;
