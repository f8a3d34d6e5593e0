//! Whether a database holds the migrations this binary embeds, for the stores' opens that
//! must not migrate (`agentctl`): they compare the `_sqlx_migrations` table with the
//! embedded migrator and refuse a store that is behind, ahead, changed or half-migrated,
//! instead of reading tables whose shape they do not know.

use std::fmt;

use sqlx::migrate::Migrator;

/// One row of `_sqlx_migrations`.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Applied {
    /// The migration's version (its file name's timestamp).
    pub version: i64,
    /// Whether it completed.
    pub success: bool,
    /// The checksum of its SQL when it was applied.
    pub checksum: Vec<u8>,
}

/// The statement reading [`Applied`] rows, from `table` (schema-qualified where needed).
#[must_use]
pub fn applied_sql(table: &str) -> String {
    format!("SELECT version, success, checksum FROM {table} ORDER BY version")
}

/// How the applied migrations differ from the embedded ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// Migrations of this binary not applied yet: the store was made by an older version.
    Behind(Vec<i64>),
    /// Migrations applied that this binary does not know: a newer version migrated it.
    Ahead(Vec<i64>),
    /// A migration whose SQL differs from the one applied under its version.
    Changed(i64),
    /// A migration that started and did not complete.
    Failed(i64),
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list(versions: &[i64]) -> String {
            versions
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        }
        match self {
            Self::Behind(v) => write!(
                f,
                "it is behind this binary: migrations {} are not applied \
                 (a worker of this version applies them when it opens the store)",
                list(v)
            ),
            Self::Ahead(v) => write!(
                f,
                "it is ahead of this binary: migrations {} come from a newer version \
                 (use a binary of that version)",
                list(v)
            ),
            Self::Changed(v) => write!(
                f,
                "migration {v} was applied with different SQL than this binary's"
            ),
            Self::Failed(v) => write!(f, "migration {v} started and did not complete"),
        }
    }
}

/// Compare the `applied` rows with `migrator`'s migrations: `None` when they are the same.
#[must_use]
pub fn compare(migrator: &Migrator, applied: &[Applied]) -> Option<Mismatch> {
    let embedded: Vec<_> = migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .collect();
    if let Some(failed) = applied.iter().find(|a| !a.success) {
        return Some(Mismatch::Failed(failed.version));
    }
    let ahead: Vec<i64> = applied
        .iter()
        .map(|a| a.version)
        .filter(|v| !embedded.iter().any(|m| m.version == *v))
        .collect();
    if !ahead.is_empty() {
        return Some(Mismatch::Ahead(ahead));
    }
    for m in &embedded {
        if let Some(a) = applied.iter().find(|a| a.version == m.version)
            && a.checksum != *m.checksum
        {
            return Some(Mismatch::Changed(m.version));
        }
    }
    let behind: Vec<i64> = embedded
        .iter()
        .map(|m| m.version)
        .filter(|v| !applied.iter().any(|a| a.version == *v))
        .collect();
    (!behind.is_empty()).then_some(Mismatch::Behind(behind))
}
