-- Run events (agent_core::store::events) are derived from the records, never written for
-- themselves: each record of a run carries its position, drawn from `event_positions` when
-- it is written, while the run's row is locked (every write to a run takes that lock), so
-- that within a run positions grow in commit order.
--
-- - transitions: `position`, and what a version's events say besides its record (what it
--   waits for, until when, and the failure).
-- - journal: `started_position`, drawn when the call is first recorded and kept after;
--   `finished_position`, drawn when it is recorded ended.
-- - signals: `position`, drawn when sent.
-- - status_changes: a status set without a version (set_status, quarantine), for its
--   event; written on those rare paths only, never by a step's commit.
--
-- Reads of every run of an agent go by position, hence the indexes: BRIN, as positions
-- follow the physical order of the rows, which costs a write next to nothing.
CREATE SEQUENCE event_positions;

ALTER TABLE transitions ADD COLUMN position bigint;
ALTER TABLE transitions ADD COLUMN waiting_for text;
ALTER TABLE transitions ADD COLUMN wake_at timestamptz;
ALTER TABLE transitions ADD COLUMN error_code text;
ALTER TABLE transitions ADD COLUMN error_message text;
ALTER TABLE journal ADD COLUMN started_position bigint;
ALTER TABLE journal ADD COLUMN finished_position bigint;
ALTER TABLE signals ADD COLUMN position bigint;

CREATE TABLE status_changes (
    position      bigint      PRIMARY KEY DEFAULT nextval('event_positions'),
    run_id        text        NOT NULL,
    version       bigint      NOT NULL,
    status        text        NOT NULL,
    error_code    text,
    error_message text,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX status_changes_run ON status_changes (run_id, position);

-- Records written before this migration get positions in the order they were written, as
-- far as their times tell (within a run, a version's calls before the version after).
CREATE TEMPORARY TABLE event_backfill ON COMMIT DROP AS
SELECT src, run_id, version, seq, id,
       row_number() OVER (ORDER BY at, run_id, version, rank, seq, id) AS n
FROM (
    SELECT 'transition' AS src, run_id, version, NULL::integer AS seq, NULL::bigint AS id,
           created_at AS at, 0 AS rank FROM transitions
    UNION ALL
    SELECT 'started', run_id, version, seq, NULL, started_at, 1 FROM journal
    UNION ALL
    SELECT 'finished', run_id, version, seq, NULL, COALESCE(finished_at, started_at), 2
    FROM journal WHERE status <> 'started'
    UNION ALL
    SELECT 'signal', run_id, NULL, NULL, id, created_at, 3 FROM signals
) records;
UPDATE transitions t SET position = b.n FROM event_backfill b
WHERE b.src = 'transition' AND t.run_id = b.run_id AND t.version = b.version;
UPDATE journal j SET started_position = b.n FROM event_backfill b
WHERE b.src = 'started' AND j.run_id = b.run_id AND j.version = b.version AND j.seq = b.seq;
UPDATE journal j SET finished_position = b.n FROM event_backfill b
WHERE b.src = 'finished' AND j.run_id = b.run_id AND j.version = b.version AND j.seq = b.seq;
UPDATE signals s SET position = b.n FROM event_backfill b WHERE b.src = 'signal' AND s.id = b.id;
SELECT setval('event_positions', (SELECT count(*) + 1 FROM event_backfill), false);

ALTER TABLE transitions ALTER COLUMN position SET DEFAULT nextval('event_positions');
ALTER TABLE transitions ALTER COLUMN position SET NOT NULL;
ALTER TABLE signals ALTER COLUMN position SET DEFAULT nextval('event_positions');
ALTER TABLE signals ALTER COLUMN position SET NOT NULL;

CREATE INDEX transitions_position ON transitions USING brin (position);
CREATE INDEX journal_started_position ON journal USING brin (started_position);
CREATE INDEX journal_finished_position ON journal USING brin (finished_position);
CREATE INDEX signals_position ON signals USING brin (position);
-- The signal a version consumed, for its event.
CREATE INDEX signals_consumed ON signals (run_id, consumed_at_version)
    WHERE consumed_at_version IS NOT NULL;

-- Who follows events (agent-pg's `events.rs`): writers notify only while a row here is
-- live; a follower renews its row while it listens and deletes it after.
CREATE TABLE event_listeners (
    id         text        PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
