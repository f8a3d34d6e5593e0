//! The schedules role's statements in PostgreSQL ([`agent_sql::schedules`]).

pub(crate) const INSERT_SCHEDULE: &str = "INSERT INTO schedules (id, agent, revision, due_at, body) \
     VALUES ($1, $2, $3, $4, $5::jsonb) ON CONFLICT (id) DO NOTHING RETURNING body";

pub(crate) const LOAD_SCHEDULE: &str = "SELECT body FROM schedules WHERE id = $1";

pub(crate) const LIST_SCHEDULES: &str = "SELECT body FROM schedules \
     WHERE ($1::text IS NULL OR agent = $1) ORDER BY id COLLATE \"C\"";

pub(crate) const REPLACE_SCHEDULE: &str = "UPDATE schedules \
     SET revision = $3, due_at = $4, body = $5::jsonb \
     WHERE id = $1 AND revision = $2 RETURNING body";

pub(crate) const DELETE_SCHEDULE: &str = "DELETE FROM schedules WHERE id = $1 RETURNING id";

pub(crate) const DUE_SCHEDULES: &str = "SELECT body FROM schedules \
     WHERE agent = $1 AND due_at <= $2 ORDER BY due_at, id COLLATE \"C\" LIMIT $3";

pub(crate) const NEXT_SCHEDULE_DUE: &str = "SELECT due_at FROM schedules \
     WHERE agent = $1 AND due_at IS NOT NULL ORDER BY due_at LIMIT 1";
