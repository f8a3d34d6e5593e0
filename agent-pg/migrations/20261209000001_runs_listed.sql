-- `list_runs` lists runs in one total order, the same in every store: newest first by the
-- millisecond of their creation, then by id as bytes. These indexes hold that order, so a
-- page after a key (`RunFilter::after`) seeks to it and reads its own rows, however many
-- pages come before it; the second serves the listing of one agent. The millisecond is
-- `ts_to_ms(created_at)` written with immutable functions (an index cannot hold a STABLE
-- one); `LIST_RUNS` in `src/sql.rs` orders by the same text.
CREATE INDEX runs_listed ON runs
    ((round(extract(epoch FROM (created_at AT TIME ZONE 'UTC')) * 1000)::bigint) DESC,
     (id COLLATE "C") DESC);
CREATE INDEX runs_agent_listed ON runs
    (agent, (round(extract(epoch FROM (created_at AT TIME ZONE 'UTC')) * 1000)::bigint) DESC,
     (id COLLATE "C") DESC);
