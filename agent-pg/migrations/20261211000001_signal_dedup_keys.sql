-- A signal may carry a dedup key (`RunStore::send_signal_once`): a trigger's message id, an
-- API client's `Idempotency-Key`. One signal per run and key; signals without one are as before.
ALTER TABLE signals ADD COLUMN dedup_key text;
CREATE UNIQUE INDEX signals_dedup ON signals (run_id, dedup_key) WHERE dedup_key IS NOT NULL;
