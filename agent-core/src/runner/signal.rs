//! Sending signals to runs: each payload checked against the graph of the run's own
//! version and its secret parts sealed before it is stored, at most once per dedup key
//! where the sender gives one.

use serde_json::Value;

use super::{Runner, RunnerError};
use crate::agent::{Agent, Handle};
use crate::store::{SignalReceipt, StoreError, check_signal_key};

impl<A, H> Runner<A, H>
where
    A: Agent + Handle<H>,
    H: Send + Sync + 'static,
{
    /// Send a signal to a run (kept until the run's waiting state consumes it). Its payload
    /// is stored with its secret parts sealed (sensitive field names, fields its declared
    /// payload type marks secret, strings holding a configured secret); the step that
    /// consumes it opens them.
    ///
    /// # Errors
    /// [`RunnerError::SignalRefused`] when the run has ended, no state of its agent waits for
    /// a signal of this name, or the payload is not the type a waiting state declared
    /// ([`check_signal`](crate::signals::check_signal): it would be kept forever, or fail the
    /// run each time it is consumed); [`RunnerError::Seal`] when the payload holds a secret
    /// and no sealing key is configured; [`StoreError::NotFound`] for an unknown run; store
    /// errors.
    pub async fn signal(
        &self,
        run_id: &str,
        name: &str,
        payload: Value,
    ) -> Result<i64, RunnerError> {
        let payload = self.checked_signal(run_id, name, payload).await?;
        Ok(self.inner.store.send_signal(run_id, name, &payload).await?)
    }

    /// Send signal `name` to run `run_id` at most once per dedup `key` (a message id, an
    /// `Idempotency-Key`): as [`signal`](Self::signal), unless the run has a signal stored
    /// under `key` ([`RunStore::send_signal_once`](crate::store::RunStore::send_signal_once)),
    /// which the receipt names as a duplicate without checking the signal again (the run
    /// may have consumed it and moved on). A sender that retries with its key after an
    /// error or a crash signals once.
    ///
    /// # Errors
    /// As [`signal`](Self::signal), and [`StoreError::Backend`] for a key that is empty,
    /// longer than [`MAX_SIGNAL_KEY_BYTES`](crate::store::MAX_SIGNAL_KEY_BYTES) or holds
    /// a NUL.
    pub async fn signal_once(
        &self,
        run_id: &str,
        name: &str,
        payload: Value,
        key: &str,
    ) -> Result<SignalReceipt, RunnerError> {
        check_signal_key(key)?;
        if let Some(id) = self.inner.store.signal_by_key(run_id, key).await? {
            return Ok(SignalReceipt {
                id,
                duplicate: true,
            });
        }
        let payload = self.checked_signal(run_id, name, payload).await?;
        Ok(self
            .inner
            .store
            .send_signal_once(run_id, name, &payload, key)
            .await?)
    }

    /// `payload` of signal `name` for run `run_id`, checked against the run's graph (its
    /// own version's) and its secret parts sealed: what is stored.
    async fn checked_signal(
        &self,
        run_id: &str,
        name: &str,
        mut payload: Value,
    ) -> Result<Value, RunnerError> {
        let run = self
            .inner
            .store
            .load_run(run_id)
            .await?
            .ok_or_else(|| StoreError::NotFound(run_id.to_owned()))?;
        // The run may be of another version (or agent) than this runner's: its own graph
        // says what it waits for.
        let stored;
        let graph = if run.fingerprint == self.inner.fingerprint {
            Some(self.inner.graph)
        } else {
            stored = self
                .inner
                .store
                .agent_graph(&run.agent, Some(&run.fingerprint))
                .await?;
            stored.as_ref()
        };
        crate::signals::check_signal(&run, graph, name, &payload)?;
        let limit = self.inner.config.max_payload_bytes;
        super::payload::fits(&payload, limit, &format!("the payload of signal `{name}`"))
            .map_err(RunnerError::PayloadTooLarge)?;
        let marked = graph
            .and_then(|g| g.signal_payload_schema(name))
            .map_or_else(Vec::new, crate::secrets::marked_fields);
        self.inner.seal_value(
            &mut payload,
            &marked,
            &format!("the payload of signal `{name}`"),
        )?;
        Ok(payload)
    }
}
