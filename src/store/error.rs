//! The store's own error: what a database failure means to the layers above,
//! whichever driver reported it. One conversion per driver (sqlx for
//! PostgreSQL and the migrations, rusqlite for SQLite's statements); no
//! layer above the store names a driver type.

use std::fmt;

/// A database failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A statement that had to find a row found none.
    NotFound,
    /// A unique constraint refused the write (`constraint` as the engine
    /// names it, when it does).
    Unique {
        /// The constraint or index, when known.
        constraint: Option<String>,
    },
    /// The database cannot serve now, through no fault of the request: a
    /// lost or refused connection, no free connection in time, a full
    /// disk, an I/O error, a read-only file, a lock held too long, the
    /// server shutting down. The same request may succeed later.
    Unavailable(String),
    /// Anything else (a bug, a schema that does not match): a cause for the
    /// log, never for the client.
    Other(String),
}

/// Result of a store call.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// True when the database could not serve (see [`Error::Unavailable`]).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unavailable(_))
    }

    /// True when a unique constraint refused the write.
    pub fn is_unique(&self) -> bool {
        matches!(self, Error::Unique { .. })
    }

    /// A failure of the store's own logic (not the engine's).
    pub fn other(why: impl fmt::Display) -> Error {
        Error::Other(why.to_string())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotFound => f.write_str("no row found"),
            Error::Unique {
                constraint: Some(c),
            } => write!(f, "unique constraint {c} violated"),
            Error::Unique { constraint: None } => f.write_str("unique constraint violated"),
            Error::Unavailable(why) => write!(f, "database unavailable: {why}"),
            Error::Other(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Error {}

/// SQLSTATE classes and codes that say the server cannot serve now:
/// 08 connection exception, 53 insufficient resources (disk full, out of
/// memory, too many connections), 57P01–57P05 operator intervention
/// (shutdown, crash recovery, idle timeouts), 58 system error (I/O), 25006
/// read-only transaction (a standby), and `XX001`/`XX002` data corrupted.
fn unavailable_sqlstate(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || code.starts_with("58")
        || matches!(
            code,
            "57P01" | "57P02" | "57P03" | "57P04" | "57P05" | "25006" | "XX001" | "XX002"
        )
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Error {
        match e {
            sqlx::Error::RowNotFound => Error::NotFound,
            sqlx::Error::Database(db) if db.is_unique_violation() => Error::Unique {
                constraint: db.constraint().map(str::to_owned),
            },
            sqlx::Error::Database(db) if db.code().is_some_and(|c| unavailable_sqlstate(&c)) => {
                Error::Unavailable(db.message().to_owned())
            }
            e @ (sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed) => Error::Unavailable(e.to_string()),
            other => Error::Other(other.to_string()),
        }
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Error {
        use rusqlite::ErrorCode as C;
        match e {
            rusqlite::Error::QueryReturnedNoRows => Error::NotFound,
            rusqlite::Error::SqliteFailure(failure, message) => {
                let text = message.unwrap_or_else(|| failure.to_string());
                match failure.code {
                    C::ConstraintViolation
                        if failure.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                            || failure.extended_code
                                == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY =>
                    {
                        Error::Unique {
                            constraint: unique_columns(&text),
                        }
                    }
                    C::DiskFull
                    | C::SystemIoFailure
                    | C::ReadOnly
                    | C::CannotOpen
                    | C::DatabaseBusy
                    | C::DatabaseLocked
                    | C::OutOfMemory
                    | C::FileLockingProtocolFailed => Error::Unavailable(text),
                    _ => Error::Other(format!("SQLite: {text}")),
                }
            }
            other => Error::Other(format!("SQLite: {other}")),
        }
    }
}

/// SQLite names no constraint; its message names the columns
/// (`UNIQUE constraint failed: receipts.grant_id, receipts.request_key`).
fn unique_columns(message: &str) -> Option<String> {
    message
        .split_once("constraint failed: ")
        .map(|(_, cols)| cols.to_owned())
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Unavailable(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite_failure(code: std::ffi::c_int, message: &str) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), Some(message.into()))
    }

    #[test]
    fn a_full_disk_or_io_error_on_sqlite_is_unavailable() {
        for code in [
            rusqlite::ffi::SQLITE_FULL,
            rusqlite::ffi::SQLITE_IOERR,
            rusqlite::ffi::SQLITE_READONLY,
            rusqlite::ffi::SQLITE_BUSY,
            rusqlite::ffi::SQLITE_CANTOPEN,
        ] {
            let e = Error::from(sqlite_failure(code, "x"));
            assert!(e.is_unavailable(), "{code}: {e:?}");
        }
    }

    #[test]
    fn a_unique_violation_on_sqlite_names_its_columns() {
        let e = Error::from(sqlite_failure(
            rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE,
            "UNIQUE constraint failed: receipts.grant_id, receipts.request_key",
        ));
        assert_eq!(
            e,
            Error::Unique {
                constraint: Some("receipts.grant_id, receipts.request_key".into())
            }
        );
        let check = Error::from(sqlite_failure(
            rusqlite::ffi::SQLITE_CONSTRAINT_CHECK,
            "CHECK constraint failed",
        ));
        assert!(matches!(check, Error::Other(_)));
    }

    #[test]
    fn lost_connections_and_server_shutdown_are_unavailable() {
        assert!(Error::from(sqlx::Error::PoolTimedOut).is_unavailable());
        assert!(Error::from(sqlx::Error::PoolClosed).is_unavailable());
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(Error::from(sqlx::Error::Io(io)).is_unavailable());
        for code in ["08006", "57P01", "53100", "58030", "25006"] {
            assert!(unavailable_sqlstate(code), "{code}");
        }
        for code in ["23505", "40001", "22021", "42P01"] {
            assert!(!unavailable_sqlstate(code), "{code}");
        }
        assert_eq!(Error::from(sqlx::Error::RowNotFound), Error::NotFound);
    }
}
