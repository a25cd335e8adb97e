//! Exactly-once resend: the table of identified batches' results.
//!
//! A node that forwards a client batch to the leader (or proposes it
//! itself) and loses the answer does not know whether it committed. It
//! resends the same batch with the same [`RequestId`]; this table makes
//! the resend harmless. It is the raft thesis' client sessions (Ongaro,
//! "Consensus: Bridging Theory and Practice", §6.3, "Implementing
//! linearizable semantics"), with the node as the client: the state
//! machine records, per client session, the result of each command by its
//! serial number, and a command whose number it has seen is answered the
//! recorded result without being executed again. Everything here is part
//! of `apply`: it reads and writes only the transaction, so every replica
//! decides the same.
//!
//! - `c` origin epoch seq -> the batch's results (`Vec<OpResult>`, bincode:
//!   a node-independent, deterministic value).
//! - `C` origin -> the origin's sessions: `(epoch, highest seq applied)`,
//!   at most [`EPOCHS_KEPT`], most recently used first.
//!
//! Bounds (deterministic, pruned inside `apply`): per session (origin,
//! epoch) the results of the newest [`WINDOW`] sequence numbers are kept
//! (seq in `(high - WINDOW, high]`); when a higher seq is applied, the
//! results falling out of the window are deleted by point deletes (no
//! scan). An id at or below `high - WINDOW` is expired: its result may be
//! gone, so it is not executed (it might have been) and each operation is
//! answered [`FsError::Unavailable`], the protocols' retry answer (the
//! thesis' "session expired" error). Per origin the newest
//! [`EPOCHS_KEPT`] epochs are kept; a new epoch (a restarted process)
//! evicts the least recently used one and deletes its window. An epoch
//! evicted and then seen again (a request in flight across four restarts
//! of its origin) would be taken for a new session: executed. The origin
//! gives up a resend within `[cluster] leader_wait_ms`, far shorter.
//!
//! Read plans: a batch with an `Op::Read` is executed as if it had no id
//! (nothing stored, nothing looked up): its answer needs chunk bytes
//! filled in after the commit, which a stored result cannot give. The
//! appliance gives such batches no id (they keep the retry answer when
//! their outcome is lost).

use duet_fs::{Batch, FsError, Op, OpResult, RequestId};

use super::{execute, Applied};
use crate::keys;
use crate::kv::{KvRead, Txn};
use crate::records::decode;

/// Results kept per session (origin, epoch): the newest this many
/// sequence numbers.
pub const WINDOW: u64 = 4096;
/// Sessions (process starts) kept per origin node.
pub const EPOCHS_KEPT: usize = 4;

/// Whether the table applies to `batch`: it changes something and reads
/// no file data (see the module's "Read plans").
pub fn applies(batch: &Batch) -> bool {
    batch.mutates() && !batch.ops.iter().any(|op| matches!(op, Op::Read { .. }))
}

/// Executes `batch`, identified by `id`, at most once: the stored results
/// when `id` was applied before, the retry answer when it is expired,
/// else the execution (its results stored under `id`).
pub fn execute_once<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, id: RequestId, batch: &Batch) -> Applied {
    let n = batch.ops.len();
    let key = keys::result(id.origin, id.epoch, id.seq);
    if let Some(v) = txn.get(&key) {
        // The same bytes on every replica: the same answer everywhere.
        let results = decode::<Vec<OpResult>>(&v).unwrap_or_else(|| vec![Err(FsError::Io); n]);
        return Applied { results, ..Default::default() };
    }
    let skey = keys::session(id.origin);
    let mut sessions: Vec<(u64, u64)> = txn.get(&skey).and_then(|v| decode(&v)).unwrap_or_default();
    match sessions.iter().position(|(e, _)| *e == id.epoch) {
        Some(i) => {
            let (epoch, high) = sessions.remove(i);
            if id.seq.saturating_add(WINDOW) <= high {
                sessions.insert(0, (epoch, high));
                return expired(n);
            }
            let mut high = high;
            if id.seq > high {
                // Out of the window (high - WINDOW, high] into
                // (seq - WINDOW, seq]: at most WINDOW point deletes,
                // usually one.
                let lowest = high.saturating_sub(WINDOW) + 1;
                let leaving = id.seq.saturating_sub(WINDOW).min(high);
                for s in lowest..=leaving {
                    txn.delete(keys::result(id.origin, epoch, s));
                }
                high = id.seq;
            }
            sessions.insert(0, (epoch, high));
        }
        None => {
            sessions.insert(0, (id.epoch, id.seq));
            while sessions.len() > EPOCHS_KEPT {
                if let Some((epoch, high)) = sessions.pop() {
                    for s in high.saturating_sub(WINDOW) + 1..=high {
                        txn.delete(keys::result(id.origin, epoch, s));
                    }
                }
            }
        }
    }
    let out = execute(txn, batch);
    txn.put_record(key, &out.results);
    txn.put_record(skey, &sessions);
    out
}

/// The answer to an expired id: not executed, each operation told to
/// retry.
fn expired(n: usize) -> Applied {
    Applied { results: vec![Err(FsError::Unavailable); n], ..Default::default() }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use duet_fs::{Batch, CreateKind, Credentials, FsError, IfExists, ObjRef, Op, OpOutput, OpResult, RequestId, WriteData, ROOT_ID};

    use super::{EPOCHS_KEPT, WINDOW};
    use crate::keys;
    use crate::kv::Txn;
    use crate::machine::{apply, Applied};
    use crate::records::Command;

    type Kv = BTreeMap<Vec<u8>, Vec<u8>>;

    /// Applies `cmd` as the store does: one transaction, then its writes.
    fn step(kv: &mut Kv, cmd: &Command) -> Applied {
        let (out, writes) = {
            let mut t = Txn::new(&*kv);
            let out = apply(&mut t, cmd);
            (out, t.into_writes())
        };
        for (k, v) in writes {
            match v {
                Some(v) => kv.insert(k, v),
                None => kv.remove(&k),
            };
        }
        out
    }

    fn init() -> Kv {
        let mut kv = Kv::new();
        step(&mut kv, &Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] });
        kv
    }

    fn id(origin: u64, epoch: u64, seq: u64) -> Option<RequestId> {
        Some(RequestId { origin, epoch, seq })
    }

    fn batch(ops: Vec<Op>, request: Option<RequestId>) -> Command {
        let mut b = Batch::new(Credentials::root(), 1_000);
        b.ops = ops;
        b.request = request;
        Command::Batch(b)
    }

    fn create(name: &str, if_exists: IfExists) -> Op {
        Op::Create { dir: ObjRef::Id(ROOT_ID), name: name.into(), kind: CreateKind::File, attrs: Default::default(), if_exists }
    }

    fn append(name: &str, data: &[u8]) -> Vec<Op> {
        vec![
            create(name, IfExists::Open),
            Op::Write { obj: ObjRef::Result(0), offset: 0, data: WriteData::Bytes(data.to_vec()), append: true },
        ]
    }

    fn size(kv: &mut Kv, name: &str) -> Option<u64> {
        let r = step(kv, &batch(vec![Op::Lookup { dir: ObjRef::Id(ROOT_ID), name: name.into() }], None));
        match &r.results[0] {
            Ok(OpOutput::Object { attrs, .. }) => Some(attrs.size),
            _ => None,
        }
    }

    fn results_count(kv: &Kv) -> usize {
        kv.keys().filter(|k| k[0] == keys::RESULT).count()
    }

    #[test]
    fn the_same_identified_batch_twice_has_one_effect_and_one_answer() {
        let mut kv = init();
        let cmd = batch(append("log", b"abc"), id(2, 7, 1));
        let first = step(&mut kv, &cmd);
        assert!(first.results.iter().all(|r| r.is_ok()), "{:?}", first.results);
        let state = kv.clone();
        let again = step(&mut kv, &cmd);
        assert_eq!(again.results, first.results, "the resend is answered the first results");
        assert_eq!(kv, state, "the resend changed nothing");
        assert_eq!(size(&mut kv, "log"), Some(3));
    }

    #[test]
    fn different_ids_and_no_id_execute_each_time() {
        let mut kv = init();
        step(&mut kv, &batch(append("log", b"abc"), id(2, 7, 1)));
        step(&mut kv, &batch(append("log", b"abc"), id(2, 7, 2)));
        step(&mut kv, &batch(append("log", b"abc"), id(3, 7, 1)));
        step(&mut kv, &batch(append("log", b"abc"), id(2, 8, 1)));
        step(&mut kv, &batch(append("log", b"abc"), None));
        step(&mut kv, &batch(append("log", b"abc"), None));
        assert_eq!(size(&mut kv, "log"), Some(18));
        assert_eq!(results_count(&kv), 4, "batches without an id store nothing");
    }

    #[test]
    fn an_exclusive_create_resent_gets_its_first_success() {
        let mut kv = init();
        let cmd = batch(vec![create("x", IfExists::Fail)], id(1, 5, 10));
        let first = step(&mut kv, &cmd);
        assert!(matches!(first.results[0], Ok(OpOutput::Object { created: true, .. })), "{:?}", first.results);
        let again = step(&mut kv, &cmd);
        assert_eq!(again.results, first.results, "no EEXIST on the resend");
        // The same change without the id (a client's own retry) fails.
        let plain = step(&mut kv, &batch(vec![create("x", IfExists::Fail)], None));
        assert_eq!(plain.results, vec![Err(FsError::Exists)]);
    }

    #[test]
    fn a_rename_resent_gets_its_first_success() {
        let mut kv = init();
        step(&mut kv, &batch(vec![create("a", IfExists::Fail)], None));
        let mv = batch(
            vec![Op::Rename {
                src_dir: ObjRef::Id(ROOT_ID),
                src_name: "a".into(),
                dst_dir: ObjRef::Id(ROOT_ID),
                dst_name: "b".into(),
                replace: false,
            }],
            id(3, 1, 1),
        );
        let first = step(&mut kv, &mv);
        assert!(first.results[0].is_ok(), "{:?}", first.results);
        let again = step(&mut kv, &mv);
        assert_eq!(again.results, first.results, "no ENOENT on the resend");
        assert_eq!(size(&mut kv, "a"), None);
        assert_eq!(size(&mut kv, "b"), Some(0));
    }

    #[test]
    fn the_window_prunes_and_an_expired_id_is_not_executed() {
        let mut kv = init();
        for seq in 1..=WINDOW + 10 {
            step(&mut kv, &batch(append("log", b"x"), id(2, 7, seq)));
        }
        assert_eq!(results_count(&kv), WINDOW as usize, "the newest WINDOW results only");
        assert!(kv.get(&keys::result(2, 7, 10)).is_none());
        assert!(kv.get(&keys::result(2, 7, 11)).is_some());
        assert_eq!(size(&mut kv, "log"), Some(WINDOW + 10));
        // Seq 5 fell out of the window: not run again, told to retry.
        let old = step(&mut kv, &batch(append("log", b"x"), id(2, 7, 5)));
        assert_eq!(old.results, vec![Err(FsError::Unavailable); 2]);
        assert_eq!(size(&mut kv, "log"), Some(WINDOW + 10));
        // Inside the window: still the stored answer.
        let kept: Vec<OpResult> = step(&mut kv, &batch(append("log", b"x"), id(2, 7, 11))).results;
        assert!(kept.iter().all(|r| r.is_ok()));
        assert_eq!(size(&mut kv, "log"), Some(WINDOW + 10));
        // A jump in seq (ids never proposed) prunes what left the window.
        step(&mut kv, &batch(append("log", b"x"), id(2, 7, 3 * WINDOW)));
        assert_eq!(results_count(&kv), 1);
    }

    #[test]
    fn out_of_order_seqs_inside_the_window_each_run_once() {
        let mut kv = init();
        for seq in [5, 3, 9, 1, 3, 5] {
            step(&mut kv, &batch(append("log", b"x"), id(2, 7, seq)));
        }
        assert_eq!(size(&mut kv, "log"), Some(4));
    }

    #[test]
    fn a_new_epoch_evicts_the_least_recently_used_session() {
        let mut kv = init();
        for epoch in 1..=EPOCHS_KEPT as u64 {
            for seq in 1..=3 {
                step(&mut kv, &batch(append("log", b"x"), id(2, epoch, seq)));
            }
        }
        // Epoch 1 used again: epoch 2 is now the least recently used.
        step(&mut kv, &batch(append("log", b"x"), id(2, 1, 4)));
        assert_eq!(results_count(&kv), 3 * EPOCHS_KEPT + 1);
        step(&mut kv, &batch(append("log", b"x"), id(2, 99, 1)));
        assert_eq!(results_count(&kv), 3 * EPOCHS_KEPT - 1, "epoch 2's results went");
        assert!(kv.get(&keys::result(2, 2, 1)).is_none());
        assert!(kv.get(&keys::result(2, 1, 1)).is_some());
        // Another origin's sessions are its own.
        step(&mut kv, &batch(append("log", b"x"), id(3, 99, 1)));
        assert!(kv.get(&keys::result(2, 99, 1)).is_some());
    }

    #[test]
    fn a_batch_with_a_read_is_executed_as_without_id() {
        let mut kv = init();
        let mut ops = append("log", b"abc");
        ops.push(Op::Read { obj: ObjRef::Result(0), offset: 0, len: 10 });
        let cmd = batch(ops, id(2, 7, 1));
        step(&mut kv, &cmd);
        step(&mut kv, &cmd);
        assert_eq!(size(&mut kv, "log"), Some(6));
        assert_eq!(results_count(&kv), 0);
    }

    #[test]
    fn replicas_applying_the_same_entries_agree() {
        let cmds: Vec<Command> = (0..50u64)
            .map(|i| batch(append(&format!("f{}", i % 3), b"y"), id(1 + i % 2, 1, 1 + (i * 7) % 13)))
            .collect();
        let (mut a, mut b) = (init(), init());
        let ra: Vec<_> = cmds.iter().map(|c| step(&mut a, c).results).collect();
        let rb: Vec<_> = cmds.iter().map(|c| step(&mut b, c).results).collect();
        assert_eq!(ra, rb);
        assert_eq!(a, b);
    }
}
