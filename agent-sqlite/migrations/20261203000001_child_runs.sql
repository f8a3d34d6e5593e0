-- Child runs: a run started by a step of another run (`NewRun::spawned_by`), which that
-- parent waits for (`waiting_for` 'children:all' or 'children:first').
--
-- `spawned_by` is the parent's id and `spawned_at_version` the version its step began at;
-- both are set, or neither (runs that are not children, forks included). Nothing is
-- written to the parent when a child ends: `claim_next` finds a waiting parent by asking
-- for its children at `version - 1`, through `runs_spawned_by`, which `list_runs` by
-- parent uses too. Partial: most runs are no one's child.
ALTER TABLE runs ADD COLUMN spawned_by TEXT;
ALTER TABLE runs ADD COLUMN spawned_at_version INTEGER;
CREATE INDEX runs_spawned_by ON runs (spawned_by, spawned_at_version)
    WHERE spawned_by IS NOT NULL;
