-- Run events (agent_core::store::events) are derived from the records, never written for
-- themselves: each record of a run carries its position, one more than the highest
-- position of any record (read from the indexes below, and from `event_clock`, the floor
-- that prune raises to the highest position before it deletes records, so that a position
-- is never drawn twice). Writes are serialized, so positions follow the order of the
-- commits, for one run and across runs; drawing one writes nothing more than the record.
--
-- - transitions: `position`, and what a version's events say besides its record (what it
--   waits for, until when, and the failure).
-- - journal: `started_position`, drawn when the call is first recorded and kept after;
--   `finished_position`, drawn when it is recorded ended.
-- - signals: `position`, drawn when sent.
-- - status_changes: a status set without a version (set_status, quarantine), for its
--   event; written on those rare paths only, never by a step's commit.
CREATE TABLE event_clock (n INTEGER NOT NULL);

ALTER TABLE transitions ADD COLUMN position INTEGER;
ALTER TABLE transitions ADD COLUMN waiting_for TEXT;
ALTER TABLE transitions ADD COLUMN wake_at INTEGER;
ALTER TABLE transitions ADD COLUMN error_code TEXT;
ALTER TABLE transitions ADD COLUMN error_message TEXT;
ALTER TABLE journal ADD COLUMN started_position INTEGER;
ALTER TABLE journal ADD COLUMN finished_position INTEGER;
ALTER TABLE signals ADD COLUMN position INTEGER;

CREATE TABLE status_changes (
    position      INTEGER PRIMARY KEY,
    run_id        TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    status        TEXT    NOT NULL,
    error_code    TEXT,
    error_message TEXT,
    created_at    INTEGER NOT NULL
);
CREATE INDEX status_changes_run ON status_changes (run_id, position);

-- Records written before this migration get positions in the order they were written, as
-- far as their times tell (within a run, a version's calls before the version after).
CREATE TEMPORARY TABLE event_backfill AS
SELECT src, run_id, version, seq, id,
       row_number() OVER (ORDER BY at, run_id, version, rank, seq, id) AS n
FROM (
    SELECT 'transition' AS src, run_id, version, NULL AS seq, NULL AS id, created_at AS at,
           0 AS rank FROM transitions
    UNION ALL
    SELECT 'started', run_id, version, seq, NULL, started_at, 1 FROM journal
    UNION ALL
    SELECT 'finished', run_id, version, seq, NULL, COALESCE(finished_at, started_at), 2
    FROM journal WHERE status <> 'started'
    UNION ALL
    SELECT 'signal', run_id, NULL, NULL, id, created_at, 3 FROM signals
);
UPDATE transitions SET position = (SELECT b.n FROM event_backfill b WHERE b.src = 'transition'
    AND b.run_id = transitions.run_id AND b.version = transitions.version);
UPDATE journal SET started_position = (SELECT b.n FROM event_backfill b WHERE b.src = 'started'
    AND b.run_id = journal.run_id AND b.version = journal.version AND b.seq = journal.seq);
UPDATE journal SET finished_position = (SELECT b.n FROM event_backfill b
    WHERE b.src = 'finished' AND b.run_id = journal.run_id AND b.version = journal.version
    AND b.seq = journal.seq);
UPDATE signals SET position = (SELECT b.n FROM event_backfill b WHERE b.src = 'signal'
    AND b.id = signals.id);
INSERT INTO event_clock (n) SELECT count(*) FROM event_backfill;
DROP TABLE event_backfill;

-- Reads of every run of an agent go by position; the signal a version consumed, for its
-- event.
CREATE INDEX transitions_position ON transitions (position);
CREATE INDEX journal_started_position ON journal (started_position);
CREATE INDEX journal_finished_position ON journal (finished_position);
CREATE INDEX signals_position ON signals (position);
CREATE INDEX signals_consumed ON signals (run_id, consumed_at_version)
    WHERE consumed_at_version IS NOT NULL;
