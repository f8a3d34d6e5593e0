-- Operators' verbs and run labels.
--
-- `runs.labels` holds a run's labels as one object, read with the run; `run_labels` holds
-- them one row per label for finding runs by label (`list_runs`), through the index on
-- `(key, value)`: Temporal's search attributes in their simple form. Labels are written
-- once, when the run is created.
ALTER TABLE runs ADD COLUMN labels jsonb NOT NULL DEFAULT '{}'::jsonb;

CREATE TABLE run_labels (
    run_id text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key    text NOT NULL,
    value  text NOT NULL,
    PRIMARY KEY (run_id, key)
);
CREATE INDEX run_labels_key_value ON run_labels (key, value, run_id);

-- A cancel asked for while a worker holds the run's lease: who and why. While it is set,
-- commits are refused and the holder writes the `cancel` transition instead.
ALTER TABLE runs ADD COLUMN cancel_requested_by text;
ALTER TABLE runs ADD COLUMN cancel_reason text;

-- Who and why, on an operator's transition (`cancel`, `terminate`); covered by its hash.
ALTER TABLE transitions ADD COLUMN note_by text;
ALTER TABLE transitions ADD COLUMN note_reason text;
