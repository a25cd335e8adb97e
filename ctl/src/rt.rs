//! The async runtime of duetctl's protocol commands (bench, cp, rm):
//! glommio executors, each a thread with its own io_uring, running many
//! connections as tasks.
//!
//! - [`block_on`] runs a future on an executor made on the calling thread
//!   (cp, rm, and the bench's coordinator: setup, sequential and
//!   single-connection work, and dispatching to the pool).
//! - [`Pool`] is a few executor threads (one per core by default); a task
//!   sent to one runs there with that executor's *slots*, the connections
//!   it owns (glommio streams belong to the executor that made them, so
//!   a client's connection is made and used on one executor).
//!
//! io_uring registers each executor's I/O memory, which counts against
//! RLIMIT_MEMLOCK (8 MiB on many machines): executors here ask for a
//! small amount ([`IO_MEMORY`]; sockets read into the caller's buffers,
//! not this memory), and the limit is raised to the hard limit when
//! allowed. glommio runs without registered buffers when registration
//! fails anyway.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use glommio::{LocalExecutorBuilder, Placement};

/// A connected stream of the runtime.
pub type Stream = glommio::net::TcpStream;

/// io_uring buffer memory per executor (glommio's minimum is 64 KiB).
pub const IO_MEMORY: usize = 256 << 10;

/// A reply that takes longer than this is an error, not a hang.
const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// Raises the soft RLIMIT_MEMLOCK to the hard limit (best effort).
fn raise_memlock() {
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            let _ = libc::setrlimit(libc::RLIMIT_MEMLOCK, &want);
        }
    }
}

fn builder(name: &str) -> LocalExecutorBuilder {
    LocalExecutorBuilder::new(Placement::Unbound).name(name).io_memory(IO_MEMORY)
}

/// Runs `f` to completion on an executor made on this thread.
pub fn block_on<T>(f: impl Future<Output = Result<T, String>>) -> Result<T, String> {
    raise_memlock();
    let ex = builder("duetctl").make().map_err(|e| format!("cannot start the async runtime: {e}"))?;
    ex.run(f)
}

/// Connects to `addr` (TCP_NODELAY, a read timeout).
pub async fn connect(addr: &str) -> Result<Stream, String> {
    let s = Stream::connect(addr).await.map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_nodelay(true).map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(READ_TIMEOUT)).map_err(|e| format!("{addr}: {e}"))?;
    Ok(s)
}

/// The values an executor of a pool owns, by key.
pub type Slots<T> = Rc<RefCell<HashMap<usize, T>>>;

type Job<T> = Box<dyn FnOnce(Slots<T>) -> Pin<Box<dyn Future<Output = ()>>> + Send>;

/// Executor threads that run tasks sent to them, each with its slots.
pub struct Pool<T: 'static> {
    txs: Vec<flume::Sender<Job<T>>>,
    handles: Vec<glommio::ExecutorJoinHandle<()>>,
}

impl<T: 'static> Pool<T> {
    /// Starts `threads` executors (threads started by this one share its
    /// network namespace: the latency mode relies on it).
    pub fn new(threads: usize) -> Result<Pool<T>, String> {
        raise_memlock();
        let mut txs = Vec::new();
        let mut handles = Vec::new();
        for _ in 0..threads.max(1) {
            let (tx, rx) = flume::unbounded::<Job<T>>();
            let h = builder("duetctl-bench")
                .spawn(move || async move {
                    let slots: Slots<T> = Rc::new(RefCell::new(HashMap::new()));
                    while let Ok(job) = rx.recv_async().await {
                        glommio::spawn_local(job(slots.clone())).detach();
                    }
                    // The pool is dropped: close the connections here.
                    slots.borrow_mut().clear();
                })
                .map_err(|e| format!("cannot start the async runtime: {e}"))?;
            txs.push(tx);
            handles.push(h);
        }
        Ok(Pool { txs, handles })
    }

    pub fn threads(&self) -> usize {
        self.txs.len()
    }

    /// Starts `f` as a task on executor `i % threads`; its result comes on
    /// the returned channel (disconnected if the task panicked).
    pub fn submit<R, F, Fut>(&self, i: usize, f: F) -> flume::Receiver<R>
    where
        R: Send + 'static,
        F: FnOnce(Slots<T>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
    {
        let (tx, rx) = flume::bounded(1);
        let job: Job<T> = Box::new(move |slots| {
            Box::pin(async move {
                let _ = tx.send(f(slots).await);
            })
        });
        let _ = self.txs[i % self.txs.len()].send(job);
        rx
    }

    /// Runs `f` on every executor and waits for all.
    pub async fn on_all<R, F, Fut>(&self, f: F) -> Vec<Option<R>>
    where
        R: Send + 'static,
        F: Fn(Slots<T>) -> Fut + Send + Clone + 'static,
        Fut: Future<Output = R> + 'static,
    {
        let rxs: Vec<_> = (0..self.threads()).map(|i| self.submit(i, f.clone())).collect();
        let mut out = Vec::new();
        for rx in rxs {
            out.push(rx.recv_async().await.ok());
        }
        out
    }
}

impl<T: 'static> Drop for Pool<T> {
    fn drop(&mut self) {
        self.txs.clear();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Pool;

    #[test]
    fn tasks_share_an_executor_and_keep_their_slots() {
        // One executor, 16 tasks that can only finish in a chain: task k
        // waits for k-1's message, so all 16 are in flight on one thread at
        // once (a thread per client would not be needed, a blocking one
        // would deadlock).
        let pool: Pool<u64> = Pool::new(1).unwrap();
        let chans: Vec<_> = (0..=16).map(|_| flume::bounded::<u64>(1)).collect();
        let rxs: Vec<_> = (0..16usize)
            .rev()
            .map(|k| {
                let (rx, tx) = (chans[k].1.clone(), chans[k + 1].0.clone());
                pool.submit(0, move |slots| async move {
                    let v = rx.recv_async().await.unwrap();
                    slots.borrow_mut().insert(k, v);
                    tx.send_async(v + 1).await.unwrap();
                    std::thread::current().id()
                })
            })
            .collect();
        chans[0].0.send(100).unwrap();
        assert_eq!(chans[16].1.recv().unwrap(), 116);
        let threads: Vec<_> = rxs.iter().map(|r| r.recv().unwrap()).collect();
        assert!(threads.iter().all(|t| *t == threads[0]) && threads[0] != std::thread::current().id());
        // The slots stay with the executor for later tasks.
        let got = pool.submit(0, |slots| async move { (0..16).map(|k| slots.borrow()[&k]).collect::<Vec<_>>() }).recv().unwrap();
        assert_eq!(got, (100..116).collect::<Vec<_>>());
    }

    #[test]
    fn work_is_spread_by_index_and_on_all_reaches_each_executor() {
        let pool: Pool<usize> = Pool::new(3).unwrap();
        assert_eq!(pool.threads(), 3);
        let rxs: Vec<_> = (0..9usize)
            .map(|k| {
                pool.submit(k, move |slots| async move {
                    slots.borrow_mut().insert(k, k);
                    std::thread::current().id()
                })
            })
            .collect();
        let ids: Vec<_> = rxs.iter().map(|r| r.recv().unwrap()).collect();
        for k in 0..9 {
            assert_eq!(ids[k], ids[k % 3], "client {k} runs on executor {}", k % 3);
        }
        assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
        let keys = super::block_on(async {
            Ok::<_, String>(
                pool.on_all(|slots| async move {
                    let mut v: Vec<usize> = slots.borrow().keys().copied().collect();
                    v.sort();
                    slots.borrow_mut().clear();
                    v
                })
                .await,
            )
        })
        .unwrap();
        let keys: Vec<Vec<usize>> = keys.into_iter().map(Option::unwrap).collect();
        assert_eq!(keys, vec![vec![0, 3, 6], vec![1, 4, 7], vec![2, 5, 8]]);
    }
}
