-- Versioned agents (issue #20): every run records the version of its agent it is on
-- (runs created before this migration are version 1), and a `migrated` transition
-- moves it to a newer one. `migrated_at_version` and `resume_base` are written only by
-- `Store::migrate_run`: the first step after a migration that carried an interrupted
-- step over reads its journal at `resume_base`, while the run is still at
-- `migrated_at_version`. The commit path never touches them.
ALTER TABLE runs ADD COLUMN agent_version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE runs ADD COLUMN migrated_at_version INTEGER;
ALTER TABLE runs ADD COLUMN resume_base INTEGER;
