//! The queue of both stores' group commits: a write goes to the database at once, in its
//! caller's task, when a slot is free and nobody waits; otherwise it queues, and what is
//! queued goes in batches, written by a task of its own, as slots free up.
//!
//! What a batch is, and how it is written, is the store's ([`BatchWriter`]): one
//! `BEGIN IMMEDIATE` transaction on SQLite (one writer, one slot), grouped statements on
//! PostgreSQL (several slots, a run at most once per batch). What the queue keeps:
//! - **No waiting when there is room**: a run stepping alone pays nothing for the grouping.
//! - **A slot is never lost**: when the write holding it ends, even if its caller's future
//!   is dropped first, the slot goes to the queue if anyone waits, else it is freed.
//! - **Cancelled callers**: a queued write whose caller stopped waiting is dropped
//!   unwritten; batches run in tasks of their own, so a caller that stops waiting does not
//!   cancel the others' writes.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use agent_core::store::StoreError;
use tokio::sync::oneshot;

/// How a store writes what its queue hands it.
pub trait BatchWriter: Send + Sync + Sized + 'static {
    /// One write (a commit, a journal entry, a signal), its statements' parameters owned.
    type Write: Send + 'static;
    /// What a write's caller hears back when it was written.
    type Written: Send + 'static;

    /// One write on its own, in its caller's task.
    fn one(
        &self,
        write: &Self::Write,
    ) -> impl Future<Output = Result<Self::Written, StoreError>> + Send;

    /// A batch taken from the queue; every write of it gets its answer
    /// ([`Queued::answer`]).
    fn many(&self, batch: Vec<Queued<Self>>) -> impl Future<Output = ()> + Send;

    /// The next batch, at most `max` writes: by default the oldest ones, in order. Callers
    /// that stopped waiting are dropped ([`Queued::abandoned`]).
    fn take_batch(&self, waiting: &mut VecDeque<Queued<Self>>, max: usize) -> Vec<Queued<Self>> {
        let mut batch = Vec::new();
        while batch.len() < max {
            let Some(next) = waiting.pop_front() else {
                break;
            };
            if !next.abandoned() {
                batch.push(next);
            }
        }
        batch
    }
}

/// A write waiting for a batch, and where its answer goes.
pub struct Queued<B: BatchWriter> {
    /// The write.
    pub write: B::Write,
    reply: oneshot::Sender<Result<B::Written, StoreError>>,
}

impl<B: BatchWriter> Queued<B> {
    /// Answer the write's caller (who may have stopped waiting).
    pub fn answer(self, outcome: Result<B::Written, StoreError>) {
        let _ = self.reply.send(outcome);
    }

    /// Its caller stopped waiting: nobody would hear the answer.
    #[must_use]
    pub fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }
}

impl<B: BatchWriter> std::fmt::Debug for Queued<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued")
            .field("abandoned", &self.abandoned())
            .finish_non_exhaustive()
    }
}

struct State<B: BatchWriter> {
    waiting: VecDeque<Queued<B>>,
    /// Writes or batches being written, each holding one slot.
    in_flight: usize,
}

/// A store's group-commit queue over its [`BatchWriter`].
pub struct WriteQueue<B: BatchWriter> {
    writer: B,
    state: Mutex<State<B>>,
    slots: usize,
    max_batch: usize,
    waited: AtomicU64,
}

impl<B: BatchWriter> std::fmt::Debug for WriteQueue<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteQueue")
            .field("slots", &self.slots)
            .field("max_batch", &self.max_batch)
            .field("waited", &self.waited())
            .field("queued", &self.queued())
            .finish_non_exhaustive()
    }
}

/// A write's turn: alone now (the write and its slot, in the future writing it), or a
/// place in the queue.
enum Turn<'a, B: BatchWriter> {
    Now(Pin<Box<dyn Future<Output = Result<B::Written, StoreError>> + Send + 'a>>),
    Queued(oneshot::Receiver<Result<B::Written, StoreError>>),
}

impl<B: BatchWriter> WriteQueue<B> {
    /// A queue writing with `writer`, `slots` writes or batches at once (at least one),
    /// batches of at most `max_batch` writes (at least one).
    pub fn new(writer: B, slots: usize, max_batch: usize) -> Self {
        Self {
            writer,
            state: Mutex::new(State {
                waiting: VecDeque::new(),
                in_flight: 0,
            }),
            slots: slots.max(1),
            max_batch: max_batch.max(1),
            waited: AtomicU64::new(0),
        }
    }

    /// The store's writer.
    pub fn writer(&self) -> &B {
        &self.writer
    }

    /// Writes or batches written at once, at most.
    #[must_use]
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Writes in one batch, at most.
    #[must_use]
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Writes that waited in the queue (the others found a free slot).
    #[must_use]
    pub fn waited(&self) -> u64 {
        self.waited.load(Ordering::Relaxed)
    }

    /// Writes waiting now.
    #[must_use]
    pub fn queued(&self) -> usize {
        self.lock().waiting.len()
    }

    fn lock(&self) -> MutexGuard<'_, State<B>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Write `write`: alone at once when a slot is free and nobody waits, else with the
    /// next batch. Which of the two is decided when this is called; the future it returns
    /// ends once the write is written (or failed).
    ///
    /// Not an `async fn`, so that the future is small: an `async fn` would keep its
    /// argument, the write, in its state as long as the call waits, and so would each
    /// store's `async fn` above it, a copy per layer, for every run waiting in the queue
    /// (thousands in one worker, issue 22's W4). The write lives once: in the queue, or in
    /// the boxed future writing it alone.
    ///
    /// # Errors
    /// The writer's; [`StoreError::Unavailable`] when the batch carrying it was
    /// interrupted, so that whether it applied is unknown.
    pub fn write(
        self: &Arc<Self>,
        write: B::Write,
    ) -> impl Future<Output = Result<B::Written, StoreError>> + Send + '_ {
        let turn = {
            let mut state = self.lock();
            if state.in_flight < self.slots && state.waiting.is_empty() {
                state.in_flight += 1;
                drop(state);
                // The slot passes to the queue when this write ends, even if its future
                // is dropped before (or never polled).
                let slot = Slot(self);
                Turn::<B>::Now(Box::pin(async move {
                    let _slot = slot;
                    self.writer.one(&write).await
                }))
            } else {
                let (reply, receiver) = oneshot::channel();
                state.waiting.push_back(Queued { write, reply });
                self.waited.fetch_add(1, Ordering::Relaxed);
                let start = state.in_flight < self.slots;
                if start {
                    state.in_flight += 1;
                }
                drop(state);
                if start {
                    self.spawn_flusher();
                }
                Turn::Queued(receiver)
            }
        };
        async move {
            match turn {
                Turn::Now(written) => written.await,
                Turn::Queued(receiver) => receiver.await.unwrap_or_else(|_| {
                    Err(StoreError::unavailable(
                        "the grouped commit was interrupted; whether it applied is unknown",
                    ))
                }),
            }
        }
    }

    /// [`write`](Self::write), its answer taken out of `B::Written` by `answer`. `None`,
    /// a write answered as another kind of write (`what`), is a bug in the store's writer,
    /// reported as [`StoreError::Backend`] rather than taken for an answer.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub fn write_then<T: 'static>(
        self: &Arc<Self>,
        write: B::Write,
        what: &'static str,
        answer: fn(B::Written) -> Option<T>,
    ) -> impl Future<Output = Result<T, StoreError>> + Send + '_ {
        let written = self.write(write);
        async move {
            let written = written.await?;
            answer(written).ok_or_else(|| {
                StoreError::backend(format!("{what} was answered as another kind of write"))
            })
        }
    }

    fn spawn_flusher(self: &Arc<Self>) {
        let this = Arc::clone(self);
        tokio::spawn(async move { this.flush().await });
    }

    /// Write what is queued, a batch at a time, until nothing is; then free the slot.
    async fn flush(self: Arc<Self>) {
        loop {
            let batch = {
                let mut state = self.lock();
                let batch = self.writer.take_batch(&mut state.waiting, self.max_batch);
                if batch.is_empty() {
                    state.in_flight -= 1;
                    return;
                }
                batch
            };
            self.writer.many(batch).await;
        }
    }
}

/// A slot held by a caller writing alone. When it ends (or the caller's future is
/// dropped), the slot goes to the queue if anyone waits, else it is freed.
struct Slot<'a, B: BatchWriter>(&'a Arc<WriteQueue<B>>);

impl<B: BatchWriter> Drop for Slot<'_, B> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        if state.waiting.is_empty() || tokio::runtime::Handle::try_current().is_err() {
            state.in_flight -= 1;
        } else {
            drop(state);
            self.0.spawn_flusher();
        }
    }
}

/// The same answer for each caller of a batch that failed as one.
#[must_use]
pub fn same_error(error: &StoreError) -> StoreError {
    match error {
        StoreError::Unavailable(e) => StoreError::Unavailable(e.clone()),
        StoreError::Backend(e) => StoreError::Backend(e.clone()),
        other => StoreError::backend(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    /// Records what it was given: writes alone, and batches.
    #[derive(Default)]
    struct Recorder {
        alone: Mutex<Vec<u32>>,
        batches: Mutex<Vec<Vec<u32>>>,
    }

    impl BatchWriter for Recorder {
        type Write = u32;
        type Written = u32;

        async fn one(&self, write: &u32) -> Result<u32, StoreError> {
            self.alone.lock().unwrap().push(*write);
            // Long enough for the others to queue behind it.
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(write * 10)
        }

        async fn many(&self, batch: Vec<Queued<Self>>) {
            self.batches
                .lock()
                .unwrap()
                .push(batch.iter().map(|q| q.write).collect());
            for q in batch {
                let answer = q.write * 10;
                q.answer(Ok(answer));
            }
        }
    }

    /// One write goes alone, the ones arriving meanwhile go in batches of at most
    /// `max_batch`, oldest first; each caller gets its own answer, and the slot is free
    /// again after.
    #[tokio::test]
    async fn writes_arriving_while_one_is_written_go_in_batches() {
        let queue = Arc::new(WriteQueue::new(Recorder::default(), 1, 3));
        let answers = spawn_all((1..=7).map(|n| {
            let queue = Arc::clone(&queue);
            async move { queue.write(n).await }
        }))
        .await;
        let answers: Vec<u32> = answers.into_iter().map(Result::unwrap).collect();
        assert_eq!(answers, (1..=7).map(|n| n * 10).collect::<Vec<_>>());
        assert_eq!(*queue.writer().alone.lock().unwrap(), [1]);
        assert_eq!(
            *queue.writer().batches.lock().unwrap(),
            [vec![2, 3, 4], vec![5, 6, 7]]
        );
        assert_eq!(queue.waited(), 6);
        assert_eq!(queue.lock().in_flight, 0, "the slot was not freed");
        // Idle again: the next write goes alone.
        assert_eq!(queue.write(8).await.unwrap(), 80);
        assert_eq!(*queue.writer().alone.lock().unwrap(), [1, 8]);
    }

    /// A caller that stops waiting while writing alone does not keep the slot: the writes
    /// queued behind it are still written.
    #[tokio::test]
    async fn a_dropped_caller_passes_its_slot_on() {
        let queue = Arc::new(WriteQueue::new(Recorder::default(), 1, 8));
        let first = tokio::spawn({
            let queue = Arc::clone(&queue);
            async move { queue.write(1).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        let second = tokio::spawn({
            let queue = Arc::clone(&queue);
            async move { queue.write(2).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        first.abort();
        let second = tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("the queued write was never written")
            .unwrap();
        assert_eq!(second.unwrap(), 20);
        assert_eq!(*queue.writer().batches.lock().unwrap(), [vec![2]]);
    }

    /// A write's turn is taken when `write` is called: a write whose future is dropped
    /// unpolled frees the slot it took, and one queued that way is never written; the
    /// futures of queued writes do not hold their writes.
    #[tokio::test]
    async fn a_write_dropped_unpolled_frees_its_slot_and_is_not_written() {
        let queue = Arc::new(WriteQueue::new(Recorder::default(), 1, 8));
        let alone = queue.write(1);
        assert_eq!(queue.lock().in_flight, 1, "the slot is taken at the call");
        let queued = queue.write(2);
        assert_eq!(queue.queued(), 1, "queued at the call");
        drop(queued);
        drop(alone);
        tokio::time::timeout(Duration::from_secs(5), async {
            while queue.lock().in_flight > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the slot was never freed");
        assert_eq!(queue.write(3).await.unwrap(), 30);
        assert_eq!(*queue.writer().alone.lock().unwrap(), [3]);
        assert!(
            queue.writer().batches.lock().unwrap().is_empty(),
            "a write whose caller dropped it unpolled was written"
        );
    }

    /// A write of a kilobyte, answered at once.
    struct Large;

    impl BatchWriter for Large {
        type Write = [u64; 128];
        type Written = ();

        async fn one(&self, _: &[u64; 128]) -> Result<(), StoreError> {
            Ok(())
        }

        async fn many(&self, batch: Vec<Queued<Self>>) {
            for q in batch {
                q.answer(Ok(()));
            }
        }
    }

    /// The future of a write holds the write nowhere but in the queue or in the boxed
    /// future writing it alone: a worker holds one per run waiting for its commit.
    #[tokio::test]
    async fn a_write_future_does_not_hold_its_write() {
        let queue = Arc::new(WriteQueue::new(Large, 1, 8));
        let alone = queue.write([1; 128]);
        let queued = queue.write([2; 128]);
        for (which, size) in [
            ("alone", size_of_val(&alone)),
            ("queued", size_of_val(&queued)),
        ] {
            assert!(size <= 64, "the {which} write's future is {size} bytes");
        }
        alone.await.unwrap();
        queued.await.unwrap();
    }

    /// Run each future in a task of its own, spawned in order, and collect their outputs.
    async fn spawn_all<F: Future + Send + 'static>(
        futures: impl IntoIterator<Item = F>,
    ) -> Vec<F::Output>
    where
        F::Output: Send + 'static,
    {
        let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.unwrap());
        }
        out
    }
}
