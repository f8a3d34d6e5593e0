//! Which database a URL or a path names: the one rule every binary of the project applies
//! (`agentctl`, the examples, the test harnesses), so that a string means the same store to
//! all of them.
//!
//! | written | store |
//! |---|---|
//! | `postgres://…`, `postgresql://…` | PostgreSQL, the URL as written |
//! | `sqlite:PATH`, `sqlite://PATH` (a `?query` is dropped) | the SQLite file `PATH` |
//! | a path with no scheme (`runs.sqlite3`, `/var/lib/agents.db`, `C:\runs.db`) | that SQLite file |
//! | anything else with a scheme (`mysql://…`, `http://…`) | refused, naming the scheme |
//!
//! ```
//! use durable_agents::store::location::{LocationError, StoreLocation};
//!
//! let pg: StoreLocation = "postgres://app@db:5432/agents".parse()?;
//! assert!(matches!(pg, StoreLocation::Postgres(_)));
//! assert_eq!(
//!     "sqlite://runs.db?mode=rwc".parse::<StoreLocation>()?,
//!     StoreLocation::Sqlite("runs.db".into())
//! );
//! assert_eq!(
//!     "mysql://db/agents".parse::<StoreLocation>(),
//!     Err(LocationError::UnsupportedScheme("mysql".into()))
//! );
//! # Ok::<(), LocationError>(())
//! ```

use std::fmt;
use std::str::FromStr;

/// A store named by a URL or a path. Parse one with [`str::parse`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreLocation {
    /// A PostgreSQL URL (`postgres://` or `postgresql://`), as written.
    Postgres(String),
    /// The path of a SQLite file (a `sqlite:` prefix and any `?query` removed).
    Sqlite(String),
}

/// Why a string names no store this project can open.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LocationError {
    /// A URL whose scheme is neither PostgreSQL's nor SQLite's.
    #[error("unsupported database URL scheme `{0}`: use postgres://… or a SQLite path")]
    UnsupportedScheme(String),
    /// An empty string, or `sqlite:` with no path.
    #[error("empty database location: use postgres://… or a SQLite path")]
    Empty,
}

impl FromStr for StoreLocation {
    type Err = LocationError;

    fn from_str(s: &str) -> Result<Self, LocationError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(LocationError::Empty);
        }
        if let Some(scheme) = scheme_of(s) {
            match scheme.to_ascii_lowercase().as_str() {
                "postgres" | "postgresql" => return Ok(Self::Postgres(s.to_owned())),
                "sqlite" => {}
                _ => return Err(LocationError::UnsupportedScheme(scheme.to_owned())),
            }
        }
        let path = match s.get(..7) {
            Some(prefix) if prefix.eq_ignore_ascii_case("sqlite:") => &s[7..],
            _ => s,
        };
        let path = path.strip_prefix("//").unwrap_or(path);
        let path = path.split('?').next().unwrap_or(path);
        if path.is_empty() {
            return Err(LocationError::Empty);
        }
        Ok(Self::Sqlite(path.to_owned()))
    }
}

/// The scheme of `s` when it reads as a URL: `sqlite:` (with or without `//`), or
/// `NAME://`. A bare `NAME:` is left to be a path, so that `C:\runs.db` and a file named
/// `a:b` stay files.
fn scheme_of(s: &str) -> Option<&str> {
    let (scheme, rest) = s.split_once(':')?;
    let valid = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (valid && (rest.starts_with("//") || scheme.eq_ignore_ascii_case("sqlite"))).then_some(scheme)
}

impl fmt::Display for StoreLocation {
    /// The SQLite path, or the PostgreSQL URL without its password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "SQLite file {path}"),
            Self::Postgres(url) => write!(f, "PostgreSQL {}", without_password(url)),
        }
    }
}

/// `url` without the password of its user info (`postgres://app:pw@db/x` becomes
/// `postgres://app@db/x`), to print, or to hand to a tool that reads the password from
/// `PGPASSWORD` or `~/.pgpass`.
#[must_use]
pub fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<StoreLocation, LocationError> {
        s.parse()
    }

    #[test]
    fn postgres_urls_are_postgres_as_written() {
        for url in [
            "postgres://u@h/db",
            "postgresql://u:p@h:5433/db?sslmode=require",
            "POSTGRES://u@h/db",
        ] {
            assert_eq!(parse(url), Ok(StoreLocation::Postgres(url.into())), "{url}");
        }
    }

    #[test]
    fn sqlite_urls_and_paths_are_sqlite_files() {
        for (written, path) in [
            ("sqlite:runs.db", "runs.db"),
            ("sqlite://runs.db?mode=rwc", "runs.db"),
            ("sqlite:///var/lib/runs.db", "/var/lib/runs.db"),
            ("SQLITE:runs.db", "runs.db"),
            ("runs.sqlite3", "runs.sqlite3"),
            ("x/y.sqlite3", "x/y.sqlite3"),
            ("/abs/path.db", "/abs/path.db"),
            (r"C:\runs\agents.db", r"C:\runs\agents.db"),
            ("odd:name.db", "odd:name.db"),
        ] {
            assert_eq!(
                parse(written),
                Ok(StoreLocation::Sqlite(path.into())),
                "{written}"
            );
        }
    }

    #[test]
    fn other_schemes_are_refused_by_name() {
        for (url, scheme) in [
            ("mysql://root@localhost/agents", "mysql"),
            ("http://example.com/db", "http"),
            ("mariadb+ssl://h/db", "mariadb+ssl"),
        ] {
            let err = parse(url).unwrap_err();
            assert_eq!(err, LocationError::UnsupportedScheme(scheme.into()));
            assert_eq!(
                err.to_string(),
                format!(
                    "unsupported database URL scheme `{scheme}`: use postgres://… or a SQLite path"
                )
            );
        }
    }

    #[test]
    fn empty_locations_are_refused() {
        for s in ["", "  ", "sqlite:", "sqlite://", "sqlite://?mode=rwc"] {
            assert_eq!(parse(s), Err(LocationError::Empty), "{s:?}");
        }
    }

    #[test]
    fn display_hides_the_password() {
        let loc = parse("postgres://app:s3cret@db:5432/agents").unwrap();
        assert_eq!(loc.to_string(), "PostgreSQL postgres://app@db:5432/agents");
        let loc = parse("postgres://app@db/agents").unwrap();
        assert_eq!(loc.to_string(), "PostgreSQL postgres://app@db/agents");
        let loc = parse("sqlite:runs.db").unwrap();
        assert_eq!(loc.to_string(), "SQLite file runs.db");
    }
}
