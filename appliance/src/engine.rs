//! The engine: takes batches from any executor, moves large write data into
//! the write log, commits the batch through the metadata store (one raft
//! proposal), fills reads from the chunk store, and counts every back-end
//! operation per protocol request.
//!
//! It runs on the data executor, which owns the [`DataPath`]; other
//! executors reach it through an [`EngineHandle`]. A batch with no large
//! write data and no copy needs nothing of the data path before its
//! commit: the handle commits it straight from the calling executor (two
//! thread hops fewer) and sends only its chunk reads, if any, to the data
//! executor.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use duet_cluster::machine::ReadPlan;
use duet_cluster_store::{StoreError, StoreHandle};
use duet_fs::{Batch, BatchCost, BatchResult, ExtentId, ObjRef, Op, OpOutput, WriteData, INLINE_MAX};

use crate::datapath::{DataCounters, DataPath};
use crate::forward::{Call, Forwarder, ROUTE_POLL};
use duet_cluster::forward_wire::ForwardOutcome;

/// The most bytes one server-side copy operation moves.
pub const COPY_MAX: u64 = 64 << 20;
/// The most bytes one copy moves on a multi-node cluster: its data is
/// pushed to the other voters in one message
/// (`duet_cache::replica::DATA_MAX`).
pub const REPLICATED_COPY_MAX: u64 = 16 << 20;

/// Names a protocol request for statistics ("smb", "create-chain").
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestTag {
    pub protocol: String,
    pub request: String,
}

impl RequestTag {
    pub fn new(protocol: &str, request: &str) -> Self {
        RequestTag { protocol: protocol.into(), request: request.into() }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("metadata: {0}")]
    Store(#[from] StoreError),
    #[error("data: {0}")]
    Io(#[from] std::io::Error),
    #[error("the engine is shutting down")]
    Closed,
    /// A cluster node could not run the batch now: no leader within
    /// `[cluster] leader_wait_ms`, or a forwarded batch whose outcome is
    /// unknown. The client gets the protocol's retry answer.
    #[error("cluster: {0}")]
    Unavailable(String),
    /// A forwarded batch failed on the leader as a local batch fails.
    #[error("on the leader: {0}")]
    Remote(String),
}

impl EngineError {
    /// What a client's operations get for a batch that failed whole: the
    /// retry answer when the cluster could not run it (no leader, an
    /// unknown outcome, a leadership change before the commit), an I/O
    /// error otherwise.
    pub fn fs_error(&self) -> duet_fs::FsError {
        match self {
            EngineError::Unavailable(_)
            | EngineError::Store(
                StoreError::NotLeader { .. }
                | StoreError::Superseded { .. }
                | StoreError::ReadUnconfirmed { .. }
                | StoreError::Overloaded { .. }
                | StoreError::NotHeld { .. },
            ) => duet_fs::FsError::Unavailable,
            _ => duet_fs::FsError::Io,
        }
    }
}

/// What one kind of protocol request has cost so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestCounts {
    /// Batches of this kind.
    pub count: u64,
    pub cost: BatchCost,
    /// File bytes READ returned, and WRITE (and server-side COPY) wrote.
    pub bytes_read: u64,
    pub bytes_written: u64,
}

/// Statistics by request type, the errors operations returned, and the
/// latency histograms (`/metrics`).
#[derive(Default)]
pub struct Stats {
    by_request: Mutex<BTreeMap<RequestTag, RequestCounts>>,
    /// (protocol, FsError kind) -> operations that failed with it.
    errors: Mutex<BTreeMap<(String, &'static str), u64>>,
    pub latency: crate::metrics::Latency,
}

impl Stats {
    /// Counts one batch of `tag` that took `elapsed` from submission to
    /// its result.
    pub fn record(&self, tag: &RequestTag, cost: &BatchCost, results: &[Result<OpOutput, duet_fs::FsError>], elapsed: Duration) {
        let (mut read, mut written) = (0u64, 0u64);
        let mut failed: Vec<&'static str> = Vec::new();
        for r in results {
            match r {
                Ok(OpOutput::Read { data, .. }) => read += data.len() as u64,
                Ok(OpOutput::Written { count, .. }) | Ok(OpOutput::Copied { count, .. }) => written += count,
                Ok(_) | Err(duet_fs::FsError::Skipped) => {}
                Err(e) => failed.push(crate::metrics::error_kind(e)),
            }
        }
        if let Ok(mut m) = self.by_request.lock() {
            let e = m.entry(tag.clone()).or_default();
            e.count += 1;
            e.cost.add(cost);
            e.bytes_read += read;
            e.bytes_written += written;
        }
        if !failed.is_empty() {
            if let Ok(mut m) = self.errors.lock() {
                for kind in failed {
                    *m.entry((tag.protocol.clone(), kind)).or_default() += 1;
                }
            }
        }
        self.latency.observe(tag, elapsed);
    }

    pub fn snapshot(&self) -> Vec<(RequestTag, RequestCounts)> {
        self.by_request.lock().map(|m| m.iter().map(|(t, c)| (t.clone(), *c)).collect()).unwrap_or_default()
    }

    /// (protocol, error kind, operations).
    pub fn errors(&self) -> Vec<(String, &'static str, u64)> {
        self.errors.lock().map(|m| m.iter().map(|((p, k), n)| (p.clone(), *k, *n)).collect()).unwrap_or_default()
    }
}

/// Chunk reads done for a batch committed on the direct path: per read
/// plan, its operation, the bytes and the chunk reads they took.
type Filled = Vec<(usize, Vec<u8>, u64)>;

/// Work on its way to the data executor.
pub enum EngineRequest {
    /// A whole batch.
    Batch { batch: Batch, tag: RequestTag, reply: flume::Sender<Result<BatchResult, EngineError>> },
    /// The chunk reads of a batch committed on the direct path.
    Reads { plans: Vec<ReadPlan>, reply: flume::Sender<Result<Filled, EngineError>> },
    /// A batch a follower forwarded to this node (the leader, it thinks):
    /// run as a local client's batch; `reply` sends the outcome back.
    Forwarded { batch: Batch, reply: Box<dyn FnOnce(ForwardOutcome) + Send> },
}

/// What the direct path needs of the data path, shareable across threads.
#[derive(Clone)]
struct Direct {
    data_dir: PathBuf,
    reserve: Arc<AtomicU64>,
    wake_destager: flume::Sender<()>,
    /// The data path's read cache: reads whose every block is there are
    /// served on the calling executor.
    reads: Arc<crate::datapath::SharedReads>,
}

/// Submits batches to the engine from any thread or executor.
#[derive(Clone)]
pub struct EngineHandle {
    tx: flume::Sender<EngineRequest>,
    pub store: StoreHandle,
    pub stats: Arc<Stats>,
    pub data_counters: Arc<DataCounters>,
    direct: Direct,
    /// A node of a multi-node cluster: routes every batch to the leader
    /// (`forward.rs`). None on a single node, which makes no network
    /// traffic.
    forward: Option<Arc<Forwarder>>,
}

/// Whether a batch needs the data path before its commit: large write
/// data goes to the write log first, and copies read their source.
fn needs_data_path(batch: &Batch) -> bool {
    batch.ops.iter().any(|op| match op {
        Op::Copy { .. } => true,
        Op::Write { data: WriteData::Bytes(b), .. } => b.len() as u64 > INLINE_MAX,
        Op::Write { data: WriteData::Logged { .. } | WriteData::Extent { .. }, .. } => true,
        _ => false,
    })
}

/// A batch of metadata only: no write data past the inline bound, no copy,
/// no read of file data. The store answers it on any member of a group
/// linearizably (a change off the leader is refused with `NotLeader`, a
/// read waits for a quorum-confirmed read index), so the engine does not
/// ask raft who leads before running it: one round trip through the
/// metadata thread less for every such batch in a cluster.
fn metadata_only(batch: &Batch) -> bool {
    !needs_data_path(batch) && !batch.ops.iter().any(|op| matches!(op, Op::Read { .. }))
}

impl EngineHandle {
    /// Makes this handle (and its clones made after) route batches to the
    /// cluster's leader.
    pub fn set_forwarder(&mut self, f: Arc<Forwarder>) {
        self.forward = Some(f);
    }

    /// The queue of the data executor (for forwarded batches to reach it).
    pub fn requests(&self) -> flume::Sender<EngineRequest> {
        self.tx.clone()
    }

    /// Runs a client batch. On a node of a multi-node cluster, the batch
    /// runs here when this node leads, else on the leader (forwarded),
    /// read-only batches included; while there is no leader it waits up to
    /// `[cluster] leader_wait_ms`, then fails with
    /// [`EngineError::Unavailable`] (the protocols' retry answer).
    pub async fn submit(&self, batch: Batch, tag: RequestTag) -> Result<BatchResult, EngineError> {
        match &self.forward {
            None => self.submit_local(batch, tag).await,
            Some(f) => self.submit_routed(f, batch, tag, f.leader_wait).await,
        }
    }

    /// [`EngineHandle::submit`] for a client that is told its request is
    /// pending while it waits (SMB's interim STATUS_PENDING, which stops
    /// the client's own request timer): it waits for a leader up to
    /// `[cluster] smb_leader_wait_ms` instead of `leader_wait_ms`.
    pub async fn submit_pending(&self, batch: Batch, tag: RequestTag) -> Result<BatchResult, EngineError> {
        match &self.forward {
            None => self.submit_local(batch, tag).await,
            Some(f) => self.submit_routed(f, batch, tag, f.smb_leader_wait).await,
        }
    }

    async fn submit_routed(&self, f: &Forwarder, mut batch: Batch, tag: RequestTag, wait: Duration) -> Result<BatchResult, EngineError> {
        let started = std::time::Instant::now();
        let deadline = started + wait;
        // Exactly-once resend: a change gets an id, so that when its
        // outcome is unknown (a lost forward answer, a local proposal not
        // committed in time) the same batch is sent again, with the same
        // id, to whoever leads, within `leader_wait_ms` of its start
        // (`resend_until`); the state machine runs
        // it at most once and answers the resend with the first results
        // (`duet_cluster::machine::sessions`). A change that reads file
        // data gets none (its read plans are not stored) and keeps the
        // retry answer.
        if batch.request.is_none() && duet_cluster::machine::sessions::applies(&batch) {
            batch.request = Some(f.request_id());
        }
        let resend = batch.request.is_some();
        // Resends go on within `leader_wait_ms` of the start: SMB's longer
        // wait (`smb_leader_wait_ms`, answered STATUS_PENDING) is for a
        // leader to appear before a batch is sent, not for a leader alone
        // without its quorum, which answers the retry answer as before.
        let resend_until = started + f.leader_wait.min(wait);
        // Why the last try's outcome is unknown (then the wait running out
        // is answered with it).
        let mut unknown: Option<String> = None;
        loop {
            match f.view.leader() {
                Some(l) if l == f.node_id => {
                    // This node leads. A read-only batch that reads file
                    // data asks raft first (the view may be one poll old):
                    // a deposed leader does not serve data it may not
                    // hold. Metadata reads are linearizable in the store
                    // whatever the role ([`metadata_only`]).
                    if !batch.mutates() && !metadata_only(&batch) && !self.leads_now().await {
                        // fall through to wait and route again
                    } else {
                        // A leader that lost its quorum holds an accepted
                        // proposal until a new term settles it: bounded
                        // here, as a forwarded batch is (outcome unknown).
                        let local = futures_lite::future::or(
                            async { Some(self.submit_local(batch.clone(), tag.clone()).await) },
                            async {
                                glommio::timer::sleep(f.timeout).await;
                                None
                            },
                        );
                        match local.await {
                            // A read changes nothing: it may run again.
                            None if !batch.mutates() => {}
                            // Identified: proposed again (same id) until
                            // the wait runs out.
                            None if resend && std::time::Instant::now() < resend_until => {
                                f.counters.resent.fetch_add(1, Ordering::Relaxed);
                                tracing::debug!("a local proposal was not committed within {} ms; resent with its id", f.timeout.as_millis());
                                unknown = Some(format!(
                                    "not committed within {} ms (no quorum?); the batch may still commit",
                                    f.timeout.as_millis()
                                ));
                            }
                            None => {
                                if resend {
                                    f.counters.gave_up.fetch_add(1, Ordering::Relaxed);
                                }
                                return Err(EngineError::Unavailable(format!(
                                    "not committed within {} ms (no quorum?); the batch may still commit",
                                    f.timeout.as_millis()
                                )))
                            }
                            // Lost the leadership before proposing (nothing
                            // was proposed): route again.
                            // Superseded: proposed, then its place went to
                            // another entry in a new term: not applied either.
                            // ReadUnconfirmed: a read whose read index no
                            // quorum confirmed (this node may be deposed).
                            // NotHeld: a membership change came between
                            // the copies and the proposal (nothing
                            // proposed): run again against the new one.
                            Some(Err(EngineError::Store(
                                StoreError::NotLeader { .. }
                                | StoreError::Superseded { .. }
                                | StoreError::ReadUnconfirmed { .. }
                                | StoreError::NotHeld { .. },
                            ))) => {}
                            Some(r) => return r,
                        }
                    }
                }
                Some(l) if f.reachable(l) => match f.call(l, &batch, deadline).await {
                    Call::Done(r) => {
                        self.stats.record(&tag, &r.cost, &r.results, started.elapsed());
                        return Ok(r);
                    }
                    Call::Again => {}
                    Call::Failed(t) => return Err(EngineError::Remote(t)),
                    // A read-only batch whose answer was lost changes
                    // nothing: routed again within the same wait (a read
                    // answered later is still inside its call's window).
                    Call::Unknown(t) if !batch.mutates() => {
                        tracing::debug!("a forwarded read's answer was lost ({t}); routed again");
                    }
                    // An identified change whose answer was lost: sent
                    // again with its id to whoever leads (the stored
                    // result answers it if it committed).
                    Call::Unknown(t) if resend && std::time::Instant::now() < resend_until => {
                        f.counters.resent.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!("a forwarded change's answer was lost ({t}); resent with its id");
                        unknown = Some(t);
                    }
                    Call::Unknown(t) => {
                        if resend {
                            f.counters.gave_up.fetch_add(1, Ordering::Relaxed);
                        }
                        return Err(EngineError::Unavailable(t));
                    }
                },
                _ => {}
            }
            let now = std::time::Instant::now();
            if now >= deadline || (unknown.is_some() && now >= resend_until) {
                if let Some(t) = unknown {
                    f.counters.gave_up.fetch_add(1, Ordering::Relaxed);
                    return Err(EngineError::Unavailable(t));
                }
                return Err(EngineError::Unavailable(match f.view.leader() {
                    Some(l) => format!("the leader (node {l}) did not take the batch within {} ms", wait.as_millis()),
                    None => format!("no leader elected within {} ms", wait.as_millis()),
                }));
            }
            glommio::timer::sleep(ROUTE_POLL).await;
        }
    }

    /// Whether this node's raft says, now, that it leads.
    async fn leads_now(&self) -> bool {
        matches!(
            self.store.query(duet_cluster_store::Query::RaftStatus).await,
            Ok(duet_cluster_store::QueryAnswer::Raft(s)) if s.leader
        )
    }

    /// Runs a batch on this node (the single node, or the cluster's leader).
    async fn submit_local(&self, batch: Batch, tag: RequestTag) -> Result<BatchResult, EngineError> {
        if !needs_data_path(&batch) {
            return self.run_direct(batch, tag).await;
        }
        let (reply, rx) = flume::bounded(1);
        self.tx.send_async(EngineRequest::Batch { batch, tag, reply }).await.map_err(|_| EngineError::Closed)?;
        rx.recv_async().await.map_err(|_| EngineError::Closed)?
    }

    /// [`EngineHandle::submit`] from a thread outside the executors, for a
    /// single node's engine (`duet-torture`, tests): it runs the batch on
    /// this node's store, so an engine of a multi-node cluster (one with a
    /// forwarder) refuses it rather than propose on a follower.
    pub fn submit_blocking(&self, batch: Batch, tag: RequestTag) -> Result<BatchResult, EngineError> {
        if self.forward.is_some() {
            return Err(EngineError::Unavailable("submit_blocking runs on a single node only; a cluster's engine routes with submit".into()));
        }
        let (reply, rx) = flume::bounded(1);
        self.tx.send(EngineRequest::Batch { batch, tag, reply }).map_err(|_| EngineError::Closed)?;
        rx.recv().map_err(|_| EngineError::Closed)?
    }

    /// [`Engine::run`] for a batch that needs no data path before its
    /// commit, from the calling executor: the same space check, commit,
    /// chunk reads (on the data executor), destager wake-up and counting.
    async fn run_direct(&self, batch: Batch, tag: RequestTag) -> Result<BatchResult, EngineError> {
        let started = std::time::Instant::now();
        let n_ops = batch.ops.len();
        if let Some(need) = crate::datapath::growth(&batch) {
            let d = &self.direct;
            if crate::datapath::space_low_at(&d.data_dir, d.reserve.load(Ordering::Relaxed), need) {
                return Ok(crate::datapath::no_space(n_ops));
            }
        }
        // A single node's reads run here (no trip to the metadata
        // thread and back: `StoreHandle::read_here`).
        let r = match self.store.read_here(&batch) {
            Some(r) => r,
            None => self.store.batch(batch).await,
        };
        let outcome = match r {
            Ok(o) => o,
            Err(e) => {
                if crate::datapath::is_enospc(&e) {
                    tracing::warn!("metadata store: {e}");
                    return Ok(crate::datapath::no_space(n_ops));
                }
                return Err(e.into());
            }
        };
        let mut applied = outcome.applied;
        let mut cost = BatchCost::default();
        cost.add(&outcome.cost);
        if !applied.reads.is_empty() {
            let mut plans = std::mem::take(&mut applied.reads);
            // Plans the read cache covers are served here; the rest go to
            // the data executor.
            plans.retain(|plan| match self.direct.reads.read_cached(plan) {
                Some((bytes, st)) => {
                    let c = &self.data_counters;
                    c.read_cache_hits.store(st.hits, Ordering::Relaxed);
                    c.read_cache_misses.store(st.misses, Ordering::Relaxed);
                    c.read_cache_bytes.store(st.bytes, Ordering::Relaxed);
                    c.read_cache_direct.fetch_add(1, Ordering::Relaxed);
                    if let Some(Ok(OpOutput::Read { data, .. })) = applied.results.get_mut(plan.op) {
                        *data = bytes;
                    }
                    false
                }
                None => true,
            });
            if !plans.is_empty() {
                let (reply, rx) = flume::bounded(1);
                self.tx.send_async(EngineRequest::Reads { plans, reply }).await.map_err(|_| EngineError::Closed)?;
                for (op, bytes, reads) in rx.recv_async().await.map_err(|_| EngineError::Closed)?? {
                    cost.chunk_reads += reads;
                    if let Some(Ok(OpOutput::Read { data, .. })) = applied.results.get_mut(op) {
                        *data = bytes;
                    }
                }
            }
        }
        if !applied.queued.is_empty() {
            let _ = self.direct.wake_destager.try_send(());
        }
        self.stats.record(&tag, &cost, &applied.results, started.elapsed());
        Ok(BatchResult { results: applied.results, cost })
    }
}

/// The engine's side: lives on the data executor.
pub struct Engine {
    pub data: Rc<DataPath>,
    pub store: StoreHandle,
    pub stats: Arc<Stats>,
    wake_destager: flume::Sender<()>,
}

/// The longest the destager sleeps between looks at an idle queue.
pub const DESTAGE_IDLE_MAX: Duration = Duration::from_secs(1);

/// The destager's next timer: `interval` after work (or a wake-up), else
/// twice the last wait, at most [`DESTAGE_IDLE_MAX`] (never below
/// `interval`).
fn next_destage_wait(last: Duration, interval: Duration, busy: bool) -> Duration {
    if busy {
        interval
    } else {
        (last * 2).min(DESTAGE_IDLE_MAX.max(interval))
    }
}

/// Builds the engine on the current (data) executor. Returns the engine,
/// the handle other executors use, and the receiver [`serve`] drains.
pub async fn start(
    data_dir: &std::path::Path,
    segment_max: u64,
    store: StoreHandle,
    destage_interval: Duration,
    replica: Option<crate::replica::ReplicaLink>,
) -> std::io::Result<(Rc<Engine>, EngineHandle, flume::Receiver<EngineRequest>)> {
    let data = DataPath::open(data_dir, segment_max, &store).await?;
    // Multi-node: the write log in several copies (replica.rs). A single
    // node has no link and sends nothing.
    if let Some(link) = replica {
        let r = crate::replica::Replica::new(&link, store.clone());
        data.set_replica(r.clone());
        glommio::spawn_local(r.serve(data.clone(), link.inbound.clone())).detach();
    }
    let (wake_tx, wake_rx) = flume::bounded(1);
    let stats = Arc::new(Stats::default());
    let direct =
        Direct {
            data_dir: data.dir().to_path_buf(),
            reserve: data.space_reserve_handle(),
            wake_destager: wake_tx.clone(),
            reads: data.shared_reads(),
        };
    let engine = Rc::new(Engine { data: data.clone(), store: store.clone(), stats: stats.clone(), wake_destager: wake_tx });
    let (tx, rx) = flume::bounded(4096);
    let handle = EngineHandle { tx, store: store.clone(), stats, data_counters: data.counters.clone(), direct, forward: None };
    // The destager: runs when woken by a commit that queued data, and on a
    // timer (what a follower's replicated entries queue wakes nothing
    // here). The timer backs off while there is nothing to destage: an
    // idle daemon must not wake two threads 50 times a second (on a slow
    // single-CPU guest that polling alone took the whole CPU).
    glommio::spawn_local(async move {
        let mut last_sweep = std::time::Instant::now();
        let mut idle_wait = destage_interval;
        loop {
            let woken = futures_lite::future::or(
                async {
                    let _ = wake_rx.recv_async().await;
                    true
                },
                async {
                    glommio::timer::sleep(idle_wait).await;
                    false
                },
            )
            .await;
            // A commit woke it: let the records of the next few
            // milliseconds join the round. A round's syncs (the chunks', and
            // the synced record of progress on the metadata thread, which
            // holds up the commits behind it) cost the same for 3 records as
            // for 256; back-to-back rounds of a few records under a stream
            // of small writes took a quarter of a lazy write's time.
            if woken {
                // A client streaming large writes: its appends and a
                // round's chunk writes compete for this executor and the
                // device, so the round waits for the stream to pause,
                // within the bounds (`duet_cache::defer`); a read of
                // queued data from the wake on ends the wait.
                let wait = data.defer_begin();
                glommio::timer::sleep(destage_interval).await;
                while data.defer_destage(&wait, destage_interval) {
                    glommio::timer::sleep(destage_interval).await;
                }
            }
            let mut destaged = 0;
            loop {
                match data.destage_once(&store).await {
                    Ok((0, _)) => break,
                    // Caught up: what came in meanwhile waits for the next
                    // round with the rest.
                    Ok((n, false)) => {
                        destaged += n;
                        break;
                    }
                    Ok((n, true)) => destaged += n,
                    Err(e) => {
                        tracing::error!("destage: {e}");
                        glommio::timer::sleep(Duration::from_millis(500)).await;
                        break;
                    }
                }
            }
            idle_wait = next_destage_wait(idle_wait, destage_interval, woken || destaged > 0);
            if data.replica().is_some() && last_sweep.elapsed() >= Duration::from_secs(1) {
                last_sweep = std::time::Instant::now();
                if let Err(e) = data.sweep_unclaimed(&store).await {
                    tracing::warn!("write log: sweeping unclaimed copies: {e}");
                }
            }
        }
    })
    .detach();
    Ok((engine, handle, rx))
}

/// Serves batches until `stop` fires or every [`EngineHandle`] is dropped;
/// each batch runs as its own task so that group commit can gather them.
/// Batches already taken finish before it returns.
pub async fn serve(engine: Rc<Engine>, rx: flume::Receiver<EngineRequest>, stop: flume::Receiver<()>) {
    let inflight = Rc::new(std::cell::Cell::new(0usize));
    loop {
        let next = futures_lite::future::or(async { rx.recv_async().await.ok() }, async {
            let _ = stop.recv_async().await;
            None
        })
        .await;
        let Some(req) = next else { break };
        let e = engine.clone();
        let n = inflight.clone();
        n.set(n.get() + 1);
        glommio::spawn_local(async move {
            match req {
                EngineRequest::Batch { batch, tag, reply } => {
                    let r = e.run(batch, &tag).await;
                    let _ = reply.send(r);
                }
                EngineRequest::Reads { plans, reply } => {
                    let mut filled = Vec::with_capacity(plans.len());
                    let mut result = Ok(());
                    for plan in &plans {
                        match e.data.read(plan).await {
                            Ok((bytes, reads)) => filled.push((plan.op, bytes, reads)),
                            Err(err) => {
                                result = Err(EngineError::Io(err));
                                break;
                            }
                        }
                    }
                    let _ = reply.send(result.map(|()| filled));
                }
                EngineRequest::Forwarded { batch, reply } => reply(e.run_forwarded(batch).await),
            }
            n.set(n.get() - 1);
        })
        .detach();
    }
    // Drain: let the batches already taken finish.
    while inflight.get() > 0 {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
}

impl Engine {
    /// Runs a batch a follower forwarded, as a local client's batch, if
    /// this node leads; says who does otherwise (nothing is proposed).
    async fn run_forwarded(&self, batch: Batch) -> ForwardOutcome {
        // A metadata-only batch goes straight to the store, which refuses
        // a change with `NotLeader` if this node no longer leads (nothing
        // proposed) and confirms a read's index with a quorum.
        if !metadata_only(&batch) {
            if let Some(refused) = self.refuse_unless_leader().await {
                return refused;
            }
        }
        match self.run(batch, &RequestTag::new("cluster", "forwarded")).await {
            Ok(r) => ForwardOutcome::Done(r),
            // Not proposed, or proposed and superseded (not applied): the
            // follower routes it again.
            Err(EngineError::Store(StoreError::NotLeader { leader, .. })) => ForwardOutcome::NotLeader { leader },
            // Overloaded: not proposed; the follower retries until its
            // leader wait runs out, then answers the retry answer.
            Err(EngineError::Store(
                StoreError::Superseded { .. }
                | StoreError::ReadUnconfirmed { .. }
                | StoreError::Overloaded { .. }
                | StoreError::NotHeld { .. },
            )) => ForwardOutcome::NotLeader { leader: None },
            Err(e) => ForwardOutcome::Failed(e.to_string()),
        }
    }

    /// `Some(answer)` when this node's raft says it does not lead now (or
    /// cannot say): a forwarded batch with file data is sent back before
    /// anything is written for it.
    async fn refuse_unless_leader(&self) -> Option<ForwardOutcome> {
        match self.store.query(duet_cluster_store::Query::RaftStatus).await {
            Ok(duet_cluster_store::QueryAnswer::Raft(s)) if s.leader => None,
            Ok(duet_cluster_store::QueryAnswer::Raft(s)) => {
                Some(ForwardOutcome::NotLeader { leader: (s.leader_id != 0).then_some(s.leader_id) })
            }
            Ok(_) => Some(ForwardOutcome::Failed("unexpected answer from the store".into())),
            Err(e) => Some(ForwardOutcome::Failed(e.to_string())),
        }
    }

    /// Turns each server-side copy whose source is a known file into a
    /// write of the source's bytes, read first (chunk store and queued
    /// records included) in a read-only batch: the state machine cannot
    /// read chunks, so this is how copies from large files work. At most
    /// [`COPY_MAX`] bytes per copy: NFSv4.2 COPY reports the short count
    /// and clients go on from there; SMB copy chunks are at most 1 MiB.
    /// Returns the indexes of the operations turned, whose `Written`
    /// results are reported as `Copied`. A copy whose read fails stays a
    /// copy, for the state machine to refuse with the right error.
    async fn resolve_copies(&self, batch: &mut Batch, cost: &mut BatchCost) -> Vec<usize> {
        let mut turned = Vec::new();
        for i in 0..batch.ops.len() {
            let Op::Copy { src: src_ref, src_offset, dst, dst_offset, len } = batch.ops[i] else {
                continue;
            };
            let mut read = Batch::new(batch.cred.clone(), batch.now_ns);
            match src_ref {
                ObjRef::Id(_) => {}
                // A source found by earlier operations of the batch (PUTFH
                // LOOKUP SAVEFH ... COPY): replay them read-only first,
                // when none of them changes anything.
                ObjRef::Result(j) if j < i && batch.ops[..=j].iter().all(|o| !o.mutates()) => {
                    read.ops.extend(batch.ops[..=j].iter().cloned());
                }
                ObjRef::Result(_) => continue,
            }
            let at = read.ops.len();
            let most = if self.data.replica().is_some() { REPLICATED_COPY_MAX } else { COPY_MAX };
            read.push(Op::Read { obj: src_ref, offset: src_offset, len: len.min(most) });
            let Ok(outcome) = self.store.batch(read).await else { continue };
            cost.add(&outcome.cost);
            let mut applied = outcome.applied;
            let Some(Ok(OpOutput::Read { data, attrs, .. })) = applied.results.get_mut(at) else { continue };
            let src = attrs.id;
            if len != u64::MAX && src_offset.checked_add(len).map_or(true, |e| e > attrs.size) {
                continue; // past the source's end: the state machine refuses it
            }
            let mut bytes = std::mem::take(data);
            if let Some(plan) = applied.reads.iter().find(|p| p.op == at) {
                match self.data.read(plan).await {
                    Ok((b, reads)) => {
                        cost.chunk_reads += reads;
                        bytes = b;
                    }
                    Err(_) => continue,
                }
            }
            // Copies run in order: what an earlier copy of this batch wrote
            // into the range is what this one reads (SMB copychunk with the
            // source as target).
            for &k in &turned {
                if let Op::Write { obj: ObjRef::Id(d), offset: o, data: WriteData::Bytes(w), .. } = &batch.ops[k] {
                    if *d == src {
                        overlay_bytes(&mut bytes, src_offset, *o, w);
                    }
                }
            }
            batch.ops[i] = Op::Write { obj: dst, offset: dst_offset, data: WriteData::Bytes(bytes), append: false };
            turned.push(i);
        }
        turned
    }

    /// Runs one batch end to end.
    pub async fn run(&self, mut batch: Batch, tag: &RequestTag) -> Result<BatchResult, EngineError> {
        let started = std::time::Instant::now();
        // A full volume refuses what would grow it, before anything is
        // written (datapath::growth; removals still run and free space).
        if let Some(need) = crate::datapath::growth(&batch) {
            if self.data.space_low(need) {
                return Ok(crate::datapath::no_space(batch.ops.len()));
            }
        }
        let n_ops = batch.ops.len();
        let mut cost = BatchCost::default();
        let copies = self.resolve_copies(&mut batch, &mut cost).await;
        let mut logged = Vec::new();
        // Large write data goes to the write log first (durable before the
        // commit that names it); small data rides in the raft entry.
        for op in batch.ops.iter_mut() {
            if let Op::Write { data, .. } = op {
                if let WriteData::Bytes(b) = data {
                    if b.len() as u64 > INLINE_MAX {
                        // On a cluster the extent goes to the other voters
                        // while this node writes it (replica.rs).
                        // The bytes go to the log (and its memory, without
                        // a copy): the op names the extent from here on.
                        let replica = self.data.replica();
                        let pushed = std::cell::Cell::new(None);
                        let len = b.len() as u64;
                        let appended = self
                            .data
                            .log_append_then(std::mem::take(b), |extent, bytes| {
                                if let Some(r) = replica {
                                    r.push(extent, bytes);
                                    pushed.set(Some(extent));
                                }
                            })
                            .await;
                        let extent = match appended {
                            Ok(l) => l,
                            Err(e) => {
                                self.data.forget(&logged);
                                if let Some(r) = replica {
                                    // Nothing will wait for these acks.
                                    r.finish(&logged);
                                    r.finish(&pushed.get().into_iter().collect::<Vec<_>>());
                                }
                                if crate::datapath::is_enospc(&e) {
                                    return Ok(crate::datapath::no_space(n_ops));
                                }
                                return Err(e.into());
                            }
                        };
                        logged.push(extent);
                        cost.log_writes += 1;
                        cost.fsyncs += 1;
                        *data = WriteData::Extent { extent, len };
                    }
                }
            }
        }
        // Architecture Invariant: an extent is durable on a majority of
        // each voter set of the configuration (both halves of a joint
        // one; this node counted) before the entry naming it is proposed.
        // The store checks the holders against the configuration the
        // proposal meets (a membership change may have come since).
        let mut holders = None;
        if let Some(r) = self.data.replica() {
            if !logged.is_empty() {
                match r.wait_majority(&logged).await {
                    Ok(h) => holders = Some(h),
                    Err(e) => {
                        self.data.forget(&logged);
                        return Err(e.into());
                    }
                }
            }
        }
        let committed = match holders {
            Some(h) => self.store.batch_held(batch, h).await,
            None => self.store.batch(batch).await,
        };
        let outcome = match committed {
            Ok(o) => o,
            Err(e) => {
                self.data.forget(&logged);
                if crate::datapath::is_enospc(&e) {
                    tracing::warn!("metadata store: {e}");
                    return Ok(crate::datapath::no_space(n_ops));
                }
                return Err(e.into());
            }
        };
        let mut applied = outcome.applied;
        cost.add(&outcome.cost);
        if !logged.is_empty() {
            let queued: HashSet<ExtentId> =
                applied.queued.iter().filter_map(|(_, r)| r.op.logged()).map(|(_, e, _)| e).collect();
            let unused: Vec<ExtentId> = logged.iter().copied().filter(|e| !queued.contains(e)).collect();
            self.data.forget(&unused);
        }
        for plan in std::mem::take(&mut applied.reads) {
            let (bytes, reads) = self.data.read(&plan).await?;
            cost.chunk_reads += reads;
            if let Some(Ok(OpOutput::Read { data, .. })) = applied.results.get_mut(plan.op) {
                *data = bytes;
            }
        }
        for i in copies {
            if let Some(Ok(OpOutput::Written { count, attrs, .. })) = applied.results.get(i) {
                let out = OpOutput::Copied { count: *count, attrs: attrs.clone() };
                applied.results[i] = Ok(out);
            }
        }
        if !applied.queued.is_empty() {
            let _ = self.wake_destager.try_send(());
        }
        self.stats.record(tag, &cost, &applied.results, started.elapsed());
        Ok(BatchResult { results: applied.results, cost })
    }
}

/// Lays `data` (at file offset `at`) over `buf` (at file offset `base`).
fn overlay_bytes(buf: &mut [u8], base: u64, at: u64, data: &[u8]) {
    let from = base.max(at);
    let to = (base + buf.len() as u64).min(at + data.len() as u64);
    if from < to {
        buf[(from - base) as usize..(to - base) as usize].copy_from_slice(&data[(from - at) as usize..(to - at) as usize]);
    }
}

#[cfg(test)]
mod destage_wait_tests {
    use super::*;

    #[test]
    fn the_idle_destager_backs_off_and_work_resets_it() {
        let i = Duration::from_millis(20);
        let mut w = i;
        let mut seen = vec![];
        for _ in 0..8 {
            w = next_destage_wait(w, i, false);
            seen.push(w.as_millis());
        }
        assert_eq!(seen, [40, 80, 160, 320, 640, 1000, 1000, 1000]);
        assert_eq!(next_destage_wait(w, i, true), i);
        // An interval above the cap is kept as it is.
        let big = Duration::from_secs(5);
        assert_eq!(next_destage_wait(big, big, false), big);
    }
}
