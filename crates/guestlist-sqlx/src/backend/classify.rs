//! What a database's errors mean: worth running the transaction again, or the database cannot
//! serve now.

#[cfg(feature = "mysql")]
use super::mysql;
#[cfg(feature = "postgres")]
use super::postgres;
#[cfg(feature = "sqlite")]
use super::sqlite;

/// `true` when the error is a deadlock, a serialization failure or a busy database: running the
/// whole transaction again may succeed.
pub(crate) fn is_retryable(err: &sqlx::Error) -> bool {
    err.as_database_error().is_some_and(is_retryable_db)
}

/// `true` when `err`, one link of an error chain, is a database driver's own error (not wrapped
/// in [`sqlx::Error`]) that is worth running the transaction again for. Wrappers such as
/// `anyhow::Error::from_boxed` hide the `sqlx::Error` and show the driver's error as the link.
pub(crate) fn is_retryable_driver_error(err: &(dyn std::error::Error + 'static)) -> bool {
    driver_error(err).is_some_and(is_retryable_db)
}

/// `true` when the database's answer is a deadlock, a serialization failure or a busy database.
pub(crate) fn is_retryable_db(db: &dyn sqlx::error::DatabaseError) -> bool {
    #[cfg(feature = "postgres")]
    if let Some(retryable) = postgres::is_retryable(db) {
        return retryable;
    }
    #[cfg(feature = "mysql")]
    if let Some(retryable) = mysql::is_retryable(db) {
        return retryable;
    }
    #[cfg(feature = "sqlite")]
    if let Some(retryable) = sqlite::is_retryable(db) {
        return retryable;
    }
    let _ = db;
    false
}

/// `err` as a driver's database error, where it is one of the enabled backends'.
pub(crate) fn driver_error<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a dyn sqlx::error::DatabaseError> {
    // sqlx::Error::Database's source is the box itself, which is an error of its own.
    if let Some(db) = err.downcast_ref::<Box<dyn sqlx::error::DatabaseError>>() {
        return Some(db.as_ref());
    }
    #[cfg(feature = "postgres")]
    if let Some(db) = err.downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return Some(db);
    }
    #[cfg(feature = "mysql")]
    if let Some(db) = err.downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return Some(db);
    }
    #[cfg(feature = "sqlite")]
    if let Some(db) = err.downcast_ref::<sqlx::sqlite::SqliteError>() {
        return Some(db);
    }
    let _ = err;
    None
}

/// `true` when the database answered with an error that says it cannot serve now (shutting
/// down, starting, out of connections or resources), rather than one about the statement.
pub(crate) fn is_unavailable(db: &dyn sqlx::error::DatabaseError) -> bool {
    let code = db.code();
    let code = code.as_deref().unwrap_or("");
    // SQLSTATE classes 08 (connection), 53 (insufficient resources), 57P (operator
    // intervention: shutdown, cannot connect now), 58 (system error); MySQL's too many
    // connections (1040), server shutdown (1053), out of memory (1037, 1038), and read-only
    // (1290, 1836: a fail-over in progress).
    if ["08", "53", "57P", "58"]
        .iter()
        .any(|class| code.starts_with(class))
    {
        return true;
    }
    #[cfg(feature = "mysql")]
    if let Some(err) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return matches!(err.number(), 1037 | 1038 | 1040 | 1053 | 1290 | 1836);
    }
    false
}
