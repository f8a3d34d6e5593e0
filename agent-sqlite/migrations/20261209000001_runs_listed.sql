-- `list_runs` lists runs in one total order, the same in every store: newest first, then
-- by id as bytes. These indexes hold that order, so a page after a key
-- (`RunFilter::after`) seeks to it and reads its own rows, however many pages come before
-- it; the second serves the listing of one agent, and replaces `runs_agent`, its prefix.
CREATE INDEX runs_listed ON runs (created_at DESC, id DESC);
CREATE INDEX runs_agent_listed ON runs (agent, created_at DESC, id DESC);
DROP INDEX runs_agent;
