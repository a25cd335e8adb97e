//! A linearizability checker for registers (Wing & Gong's search, with
//! Lowe's memoisation of (linearized set, state)), used by the whole-group
//! simulation (`tests/sim.rs`) and by the real-process partition tests
//! (`appliance/tests/cluster_partition.rs`), which record real clients'
//! operations on small files, one register per file.
//!
//! Sans-I/O: times are plain numbers the caller measured on a monotonic
//! clock (any unit; only their order matters). A write whose outcome the
//! client does not know (an error, a timeout, a lost connection) is
//! recorded with `ret: None`: it may have taken effect at any time after
//! its call, or never. A read that failed constrains nothing and is left
//! out by the caller (or recorded as pending: pending reads are ignored).

use std::collections::HashSet;

/// One operation on a register: a write of a value or a read that
/// returned one (`None`: the file did not exist). `ret: None`: it never
/// returned (a timed-out write: it may or may not have taken effect).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegOp {
    pub write: bool,
    pub value: Option<Vec<u8>>,
    pub call: u64,
    pub ret: Option<u64>,
}

/// Whether `ops` (one register, starting as `None`) has a linearization:
/// an order of all completed operations and some of the pending ones that
/// respects real time (an operation that returned before another was
/// called comes first) in which every read returns the latest write.
pub fn check_register(ops: &[RegOp]) -> Result<(), String> {
    // A pending write nobody read can be left out (a pending operation
    // may be dropped from a history); pending reads constrain nothing.
    let read_values: HashSet<Option<Vec<u8>>> =
        ops.iter().filter(|o| !o.write && o.ret.is_some()).map(|o| o.value.clone()).collect();
    let ops: Vec<&RegOp> = ops
        .iter()
        .filter(|o| o.ret.is_some() || (o.write && read_values.contains(&o.value)))
        .collect();
    let n = ops.len();
    let words = n.div_ceil(64).max(1);
    let completed: Vec<bool> = ops.iter().map(|o| o.ret.is_some()).collect();
    let total_completed = completed.iter().filter(|c| **c).count();
    let ret = |i: usize| ops[i].ret.unwrap_or(u64::MAX);
    // Depth-first search with an explicit stack of (linearized set, state,
    // number of completed ops linearized).
    let mut seen: HashSet<(Vec<u64>, Option<Vec<u8>>)> = HashSet::new();
    let mut stack: Vec<(Vec<u64>, Option<Vec<u8>>, usize)> = vec![(vec![0; words], None, 0)];
    let mut steps: u64 = 0;
    // The deepest point the search reached (most completed operations
    // linearized), for the report of a violation.
    let mut deepest: (usize, Vec<u64>, Option<Vec<u8>>) = (0, vec![0; words], None);
    while let Some((set, state, done)) = stack.pop() {
        if done == total_completed {
            return Ok(());
        }
        if done > deepest.0 {
            deepest = (done, set.clone(), state.clone());
        }
        steps += 1;
        if steps > 5_000_000 {
            return Err(format!("checker gave up after {steps} steps on {n} operations"));
        }
        let is_set = |i: usize| set[i / 64] >> (i % 64) & 1 == 1;
        // An operation may go next if no other unlinearized one returned
        // before it was called.
        let min_ret = (0..n).filter(|&i| !is_set(i)).map(ret).min().unwrap_or(u64::MAX);
        for i in 0..n {
            if is_set(i) || ops[i].call > min_ret {
                continue;
            }
            let o = ops[i];
            let next_state = if o.write {
                o.value.clone()
            } else if o.value == state {
                state.clone()
            } else {
                continue;
            };
            let mut s2 = set.clone();
            s2[i / 64] |= 1 << (i % 64);
            let key = (s2, next_state);
            if seen.insert(key.clone()) {
                stack.push((key.0, key.1, done + completed[i] as usize));
            }
        }
    }
    let show = |o: &&RegOp| {
        format!(
            "{} {} [{}, {}]",
            if o.write { "W" } else { "R" },
            o.value.as_deref().map(String::from_utf8_lossy).unwrap_or("-".into()),
            o.call,
            o.ret.map_or("pending".to_string(), |r| r.to_string())
        )
    };
    // From the deepest point: the value then and the operations not yet
    // linearized, earliest called first (the violation is among them).
    let (done, set, state) = deepest;
    let mut left: Vec<&&RegOp> = (0..n).filter(|&i| set[i / 64] >> (i % 64) & 1 == 0).map(|i| &ops[i]).collect();
    left.sort_by_key(|o| o.call);
    let shown: Vec<String> = left.iter().take(24).map(|o| show(o)).collect();
    Err(format!(
        "no linearization of {n} operations: at most {done} of the {total_completed} completed ones fit, the register then \
         holding {}; not placed, earliest first: {}",
        state.as_deref().map(String::from_utf8_lossy).unwrap_or("-".into()),
        shown.join("; ")
    ))
}

/// The history of one register as a client would build it: the initial
/// value (a write that returned before anything else was called) then the
/// operations in any order.
pub fn with_initial(initial: Option<Vec<u8>>, ops: &[RegOp]) -> Vec<RegOp> {
    let first = ops.iter().map(|o| o.call).min().unwrap_or(1);
    let mut out = Vec::with_capacity(ops.len() + 1);
    // Times are shifted by 2 so that the initial write fits before them.
    out.push(RegOp { write: true, value: initial, call: 0, ret: Some(1) });
    out.extend(ops.iter().map(|o| RegOp {
        call: o.call - first + 2,
        ret: o.ret.map(|r| r - first + 2),
        ..o.clone()
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(v: &str, call: u64, ret: Option<u64>) -> RegOp {
        RegOp { write: true, value: Some(v.as_bytes().to_vec()), call, ret }
    }

    fn r(v: Option<&str>, call: u64, ret: u64) -> RegOp {
        RegOp { write: false, value: v.map(|v| v.as_bytes().to_vec()), call, ret: Some(ret) }
    }

    #[test]
    fn checker_accepts_linearizable_histories() {
        // Sequential.
        assert!(check_register(&[r(None, 0, 1), w("a", 2, Some(3)), r(Some("a"), 4, 5)]).is_ok());
        // Overlapping writes: a read may see either, and two later reads
        // must agree on the order (b then a).
        let h = [w("a", 0, Some(10)), w("b", 1, Some(9)), r(Some("b"), 2, 3), r(Some("a"), 11, 12)];
        assert!(check_register(&h).is_ok());
        // A read concurrent with a write sees the old or the new value.
        assert!(check_register(&[w("a", 0, Some(1)), w("b", 2, Some(6)), r(Some("a"), 3, 4), r(Some("b"), 5, 7)]).is_ok());
        // A pending (timed-out) write may take effect late, or never.
        assert!(check_register(&[w("a", 0, None), r(None, 1, 2), r(Some("a"), 30, 31)]).is_ok());
        assert!(check_register(&[w("a", 0, None), r(None, 1, 2)]).is_ok());
    }

    #[test]
    fn checker_rejects_non_linearizable_histories() {
        // A stale read: b was written (and acknowledged) before the read began.
        let stale = [w("a", 0, Some(1)), w("b", 2, Some(3)), r(Some("a"), 4, 5)];
        let e = check_register(&stale).unwrap_err();
        // The report names the read that does not fit and the value then.
        assert!(e.contains("holding b; not placed, earliest first: R a [4, 5]"), "{e}");
        // A lost acknowledged write: the file reads as never written.
        assert!(check_register(&[w("a", 0, Some(1)), r(None, 2, 3)]).is_err());
        // Two reads that see two concurrent writes in opposite orders.
        let h = [w("a", 0, Some(10)), w("b", 0, Some(10)), r(Some("a"), 11, 12), r(Some("b"), 13, 14), r(Some("a"), 15, 16)];
        assert!(check_register(&h).is_err());
        // A value read before its write was called.
        assert!(check_register(&[r(Some("a"), 0, 1), w("a", 2, Some(3))]).is_err());
        // A value nobody wrote.
        assert!(check_register(&[w("a", 0, Some(1)), r(Some("z"), 2, 3)]).is_err());
        // A timed-out write seen, then the older value again.
        assert!(check_register(&[w("a", 0, Some(1)), w("b", 2, None), r(Some("b"), 3, 4), r(Some("a"), 5, 6)]).is_err());
    }

    #[test]
    fn initial_value_comes_first() {
        let h = with_initial(Some(b"x".to_vec()), &[r(Some("x"), 100, 101), w("a", 102, Some(103)), r(Some("a"), 104, 105)]);
        assert!(check_register(&h).is_ok());
        // The initial value read after an acknowledged write: stale.
        let h = with_initial(Some(b"x".to_vec()), &[w("a", 100, Some(101)), r(Some("x"), 102, 103)]);
        assert!(check_register(&h).is_err());
    }
}
