-- `runs.state` holds the state at `snapshot_version` (the latest snapshot), written only when
-- a commit stores a snapshot; the current state adds the patches of later transitions. A step
-- no longer rewrites the whole state, so I/O per step follows what changed.
ALTER TABLE runs ADD COLUMN snapshot_version INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET snapshot_version = version;
