//! The step's journal: entries read back for replay, recorded (or deferred to the commit),
//! sealed where the policy says, and the results so far.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::Value;

use super::StepCx;
use crate::runner::RunnerError;
use crate::runner::caches::lock;
use crate::secrets::SealError;
use crate::store::{
    CallStatus, EntryKind, JournalEntry, RunFailure, StoreError, input_hash, now_ms,
};

impl StepCx<'_> {
    pub(crate) fn next_seq(&self) -> u32 {
        self.seq.fetch_add(1, Ordering::SeqCst)
    }

    /// The entry journaled at `seq`, its sealed values opened: what replay executes is what
    /// was first executed. A value sealed with a key this runner lacks quarantines the run
    /// (`seal.key_missing`): the entry is returned still sealed, and the step, interrupted,
    /// executes nothing more.
    pub(crate) fn journaled(&self, seq: u32) -> Option<JournalEntry> {
        let mut entry = {
            let journal = lock(&self.journal);
            (journal.binary_search_by_key(&seq, |e| e.seq).ok()).map(|i| journal[i].clone())?
        };
        if let Err(e) = self.open_entry(&mut entry) {
            self.set_quarantine(RunFailure {
                code: e.code().into(),
                message: format!("journal entry #{seq} of `{}`: {e}", entry.name),
            });
        }
        Some(entry)
    }

    /// Open the sealed values of a journaled entry, in place.
    pub(crate) fn open_entry(&self, entry: &mut JournalEntry) -> Result<(), SealError> {
        let keys = &self.inner.config.seal_keys;
        keys.open_all(&mut entry.input)?;
        if let Some(output) = entry.output.as_mut() {
            keys.open_all(output)?;
        }
        Ok(())
    }

    /// `value` as stored in the journal: sealed where the policy says so.
    pub(crate) fn sealed(
        &self,
        mut value: Value,
        marked: &[String],
        what: &str,
    ) -> Result<Value, SealError> {
        self.inner.seal_value(&mut value, marked, what)?;
        Ok(value)
    }

    /// Durably record an entry, fenced by the lease, after the deferred read entries. A
    /// failure is fatal for the step.
    pub(crate) async fn record(&self, entry: JournalEntry) -> bool {
        // Boxed, and only when there is something to write: this future's space is held
        // for the whole tool call by every run in flight (it is part of the call's).
        if self.has_deferred() && !Box::pin(self.write_deferred()).await {
            return false;
        }
        self.write(entry).await
    }

    /// Journal a read call's entry in memory; it is written with the step's commit, or
    /// before the step's next write or call ([`write_deferred`](Self::write_deferred)).
    /// Should the process die in between, the read runs again when the step resumes,
    /// which a read may.
    pub(super) fn defer(&self, entry: JournalEntry) {
        self.remember(entry.clone());
        let mut deferred = lock(&self.deferred);
        // Most steps defer one read: room for four (a `Vec`'s first growth) would be
        // held by every run in flight until its commit.
        deferred.reserve_exact(1);
        deferred.push(entry);
    }

    /// Whether read entries wait to be written.
    pub(super) fn has_deferred(&self) -> bool {
        !lock(&self.deferred).is_empty()
    }

    /// Write the deferred read entries now. A failure is fatal for the step.
    pub(crate) async fn write_deferred(&self) -> bool {
        let deferred = std::mem::take(&mut *lock(&self.deferred));
        for entry in deferred {
            if !self.write(entry).await {
                return false;
            }
        }
        true
    }

    /// The deferred read entries, for the step's commit to write.
    pub(crate) fn take_deferred(&self) -> Vec<JournalEntry> {
        std::mem::take(&mut *lock(&self.deferred))
    }

    /// Add or replace `entry` in the step's journal in memory.
    fn remember(&self, entry: JournalEntry) {
        let mut journal = lock(&self.journal);
        match journal.binary_search_by_key(&entry.seq, |e| e.seq) {
            Ok(i) => journal[i] = entry,
            Err(i) => {
                journal.reserve_exact(1);
                journal.insert(i, entry);
            }
        }
    }

    /// Write one entry, fenced by the lease, retrying transient store errors.
    async fn write(&self, entry: JournalEntry) -> bool {
        let lease = self.lease();
        let mut attempt = 0;
        loop {
            match self.inner.store.record_entry(&lease, &entry).await {
                Ok(()) => {
                    self.remember(entry);
                    return true;
                }
                Err(e) if e.is_transient() && attempt < self.inner.config.store_retries => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(50 << attempt.min(6))).await;
                }
                Err(StoreError::LeaseLost { .. } | StoreError::Conflict { .. }) => {
                    self.set_fatal(RunnerError::LeaseLost(self.run_id.clone()));
                    return false;
                }
                Err(e) => {
                    self.set_fatal(e.into());
                    return false;
                }
            }
        }
    }

    /// A new entry for `input`, hashed as it is executed and stored sealed where the policy
    /// says so (`marked`: the fields the input's type marks secret).
    pub(crate) fn new_entry(
        &self,
        seq: u32,
        kind: EntryKind,
        name: &str,
        input: Value,
        marked: &[String],
    ) -> Result<JournalEntry, SealError> {
        let hash = input_hash(&input);
        let input = self.sealed(input, marked, &format!("the input of `{name}`"))?;
        Ok(JournalEntry {
            run_id: self.run_id.clone(),
            version: self.version,
            seq,
            kind,
            state: self.state.name.clone(),
            name: name.to_owned(),
            tool_kind: None,
            input_hash: hash,
            input,
            idempotency_key: None,
            status: CallStatus::Started,
            output: None,
            error_class: None,
            error_code: None,
            error_message: None,
            attempts: 0,
            duration_ms: 0,
            started_at: now_ms(),
            finished_at: None,
        })
    }

    /// `read` applied to the step's journal in memory: its entries replayed and recorded.
    pub(crate) fn journal_entries<T>(&self, read: impl FnOnce(&[JournalEntry]) -> T) -> T {
        read(&lock(&self.journal))
    }

    /// Results of successful tool calls in this visit, oldest first, for the router's prompt.
    pub(crate) fn results_so_far(&self) -> Vec<(u32, JournalEntry)> {
        lock(&self.journal)
            .iter()
            .filter(|e| e.kind == EntryKind::Tool && e.status == CallStatus::Succeeded)
            .map(|e| (e.seq, e.clone()))
            .collect()
    }
}
