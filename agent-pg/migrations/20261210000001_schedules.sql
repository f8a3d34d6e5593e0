-- Schedules (`ScheduleStore`): each one a JSON document beside its agent, its revision
-- (every write is a compare-and-set on it) and when a worker should next look at it
-- (`Schedule::due_at`, NULL when nothing will come due). The index serves the workers'
-- question "which of my agent's schedules are due".
CREATE TABLE schedules (
    id text PRIMARY KEY,
    agent text NOT NULL,
    revision bigint NOT NULL,
    due_at bigint,
    body jsonb NOT NULL
);
CREATE INDEX schedules_due ON schedules (agent, due_at) WHERE due_at IS NOT NULL;
