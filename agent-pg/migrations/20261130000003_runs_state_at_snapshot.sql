-- Rewriting a run's whole current state on every commit made the WAL and the dead tuples of
-- `runs` grow with the state's size per step (quadratic over a run whose state grows). From
-- here on `runs.state` holds the state at `snapshot_version` (the latest snapshot), written
-- only when a commit stores a snapshot; the current state is that plus the patches in
-- `transitions` after it (at most about the state's size, by construction of the snapshots).
ALTER TABLE runs ADD COLUMN snapshot_version bigint;
UPDATE runs SET snapshot_version = version;
ALTER TABLE runs ALTER COLUMN snapshot_version SET NOT NULL;
ALTER TABLE runs ALTER COLUMN snapshot_version SET DEFAULT 0;
COMMENT ON COLUMN runs.state IS
    'The state at snapshot_version; the current state adds the patches of later transitions.';
