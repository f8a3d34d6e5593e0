-- `claim_next` finds its runs through one index per way of being claimable, as on
-- PostgreSQL (see `agent-sqlite/src/sql.rs`, `claim_candidates`), so that its cost does
-- not grow with the runs that cannot be claimed: a million runs waiting for signals that
-- have not come, completed runs, or runs in flight under live leases. Before, the claim
-- read every running, compensating and waiting run (through `runs_status` or
-- `runs_claimable`) and sorted them.

-- Runnable runs nobody holds, oldest first.
CREATE INDEX runs_unleased ON runs (created_at, seq)
    WHERE status IN ('running', 'compensating') AND lease_owner IS NULL;
-- Leases by expiry: expired ones to take over, and when the next one expires.
CREATE INDEX runs_lease_expiry ON runs (lease_expires_at)
    WHERE lease_owner IS NOT NULL AND status IN ('running', 'compensating', 'waiting');
-- Runs with a timer: a wait's timeout (`wait_timeout_ms`), a retry's backoff.
CREATE INDEX runs_waiting_wake ON runs (wake_at) WHERE wake_at IS NOT NULL;
-- Parents waiting for their children.
CREATE INDEX runs_waiting_children ON runs (created_at, seq)
    WHERE status = 'waiting' AND waiting_for IN ('children:all', 'children:first');
-- Runs whose cancel is requested.
CREATE INDEX runs_cancel_requested ON runs (created_at, seq)
    WHERE cancel_requested_by IS NOT NULL;
-- Pending signals, oldest first: the claim takes signalled runs in the order their
-- signals came (`signals_pending` orders them by run).
CREATE INDEX signals_pending_id ON signals (id) WHERE consumed_at_version IS NULL;

-- Nothing reads `runs_claimable` any more (the claim's arms and `next_due` have their
-- own indexes); every live run had an entry in it, written again at each change of status.
DROP INDEX runs_claimable;
