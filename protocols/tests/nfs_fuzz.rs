//! Hostile input never panics (brief invariant 4): every decoder is fed
//! truncated real records, mutated real records and pseudo-random bytes
//! from a deterministic xorshift generator, and must return (Ok or Err)
//! without panicking. Any finding becomes a named regression test below.

use std::path::PathBuf;

use duet_protocols::nfs::mount::{ExportNode, Exports, MountList, MountRes3};
use duet_protocols::nfs::nfs3::{proc3, Nfs3Args, Nfs3Results};
use duet_protocols::nfs::nfs4::attrs::Attrs;
use duet_protocols::nfs::nfs4::{
    ArgOp4, Bitmap4, Compound4Args, Compound4Res, CompoundLimits, Fattr4, ResOp4,
};
use duet_protocols::nfs::portmap::{parse_uaddr, CallArgs, Mapping, PmapList, Rpcb, RpcbList};
use duet_protocols::nfs::rpc::{CallBody, Credential, RecordAssembler, ReplyHeader, RpcMessage};
use duet_protocols::nfs::xdr::{XdrDecode, XdrEncode, XdrReader, XdrWriter};

/// xorshift64* (Marsaglia / Vigna): deterministic, seedable, no deps.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// Bytes shaped like XDR: mostly 4-byte words with small values (so
    /// counts, lengths and discriminants hit real arms), sometimes noise.
    fn xdrish(&mut self, len_words: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len_words * 4);
        for _ in 0..len_words {
            let word: u32 = match self.below(8) {
                0..=3 => self.below(4) as u32,
                4 => self.below(80) as u32,
                5 => 10_000 + self.below(100) as u32,
                6 => u32::MAX - self.below(3) as u32,
                _ => self.next() as u32,
            };
            out.extend_from_slice(&word.to_be_bytes());
        }
        if self.below(4) == 0 {
            out.truncate(out.len().saturating_sub(self.below(4)));
        }
        out
    }

    fn mutate(&mut self, rec: &[u8]) -> Vec<u8> {
        let mut out = rec.to_vec();
        for _ in 0..1 + self.below(4) {
            if out.is_empty() {
                break;
            }
            let i = self.below(out.len());
            match self.below(4) {
                0 => out[i] ^= 1 << self.below(8),
                1 => out[i] = self.next() as u8,
                2 => {
                    // Set a whole aligned word to a boundary value.
                    let w = i & !3;
                    let v: u32 = [0, 1, 2, 0x7fff_ffff, 0xffff_ffff][self.below(5)];
                    for (k, b) in v.to_be_bytes().iter().enumerate() {
                        if let Some(x) = out.get_mut(w + k) {
                            *x = *b;
                        }
                    }
                }
                _ => out.truncate(i),
            }
        }
        out
    }
}

fn capture_records() -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/nfs");
    let mut out = Vec::new();
    for name in [
        "v41_calls.hex",
        "v41_replies.hex",
        "v42_calls.hex",
        "v42_replies.hex",
    ] {
        let text = std::fs::read_to_string(dir.join(name)).expect("testdata");
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let line = line.trim();
            out.push(
                (0..line.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&line[i..i + 2], 16).unwrap())
                    .collect(),
            );
        }
    }
    out
}

/// Runs every decoder over `buf`. Results are discarded: only panics (and
/// the encoders' behaviour on what did decode) matter.
fn decode_everything(buf: &[u8]) {
    // RPC layer.
    let mut r = XdrReader::new(buf);
    if let Ok(msg) = RpcMessage::decode(&mut r) {
        if let RpcMessage::Call(c) = &msg {
            let _ = Credential::parse(&c.cred);
            let _ = Credential::parse(&c.verf);
        }
        let rest = r;
        let mut a = rest;
        if let Ok(args) = Compound4Args::decode(&mut a, &CompoundLimits::default()) {
            // Whatever decodes whole must encode to as many bytes (not
            // always the same ones: padding is read leniently).
            let mut w = XdrWriter::new();
            args.encode(&mut w);
            if args.stop.is_none() {
                assert_eq!(w.len(), rest.remaining(), "compound args re-encode");
            }
            for op in &args.ops {
                fattrs_of_arg(op);
            }
        }
        let mut b = rest;
        if let Ok(res) = Compound4Res::decode(&mut b, 256) {
            let mut w = XdrWriter::new();
            res.encode(&mut w);
            assert_eq!(w.len(), rest.remaining(), "compound res re-encode");
            for op in &res.results {
                fattrs_of_res(op);
            }
        }
        for p in 0..23 {
            let mut c = rest;
            let _ = Nfs3Args::decode(p, &mut c);
            let mut c = rest;
            let _ = Nfs3Results::decode(p, &mut c);
        }
    }
    let _ = CallBody::decode(&mut XdrReader::new(buf));
    let _ = ReplyHeader::decode(&mut XdrReader::new(buf));

    // Without the RPC header: the bodies directly.
    let _ = Compound4Args::decode(&mut XdrReader::new(buf), &CompoundLimits::default());
    let _ = Compound4Res::decode(&mut XdrReader::new(buf), 256);
    for op in [
        0, 1, 2, 3, 9, 18, 22, 26, 34, 38, 42, 43, 53, 60, 68, 71, 72, 10044,
    ] {
        if let Ok(arg) = ArgOp4::decode(op, 2, &mut XdrReader::new(buf)) {
            fattrs_of_arg(&arg);
        }
        if let Ok(res) = ResOp4::decode(op, &mut XdrReader::new(buf)) {
            fattrs_of_res(&res);
        }
    }
    for p in [
        proc3::SETATTR,
        proc3::CREATE,
        proc3::MKNOD,
        proc3::WRITE,
        proc3::READDIRPLUS,
    ] {
        let _ = Nfs3Args::decode(p, &mut XdrReader::new(buf));
        let _ = Nfs3Results::decode(p, &mut XdrReader::new(buf));
    }
    if let Ok(f) = Fattr4::decode(&mut XdrReader::new(buf)) {
        let _ = Attrs::from_fattr4(&f);
    }
    if let Ok(mask) = Bitmap4::decode(&mut XdrReader::new(buf)) {
        let vals = buf.get(4 + 4 * mask.words().len()..).unwrap_or(&[]);
        let _ = Attrs::decode(&mask, vals);
    }

    // MOUNT and portmap.
    let _ = MountRes3::decode(&mut XdrReader::new(buf));
    let _ = Exports::decode(&mut XdrReader::new(buf));
    let _ = ExportNode::decode(&mut XdrReader::new(buf));
    let _ = MountList::decode(&mut XdrReader::new(buf));
    let _ = Mapping::decode(&mut XdrReader::new(buf));
    let _ = PmapList::decode(&mut XdrReader::new(buf));
    let _ = CallArgs::decode(&mut XdrReader::new(buf));
    let _ = Rpcb::decode(&mut XdrReader::new(buf));
    let _ = RpcbList::decode(&mut XdrReader::new(buf));
    if let Ok(s) = std::str::from_utf8(buf) {
        let _ = parse_uaddr(s);
    }

    // Record marking, in random-ish chunk sizes derived from the input.
    let mut asm = RecordAssembler::new(4096, 4);
    let mut rest = buf;
    let mut step = 1 + buf.first().copied().unwrap_or(0) as usize % 7;
    while !rest.is_empty() {
        let chunk = &rest[..step.min(rest.len())];
        match asm.push(chunk) {
            Ok(n) => {
                assert!(n <= chunk.len());
                rest = &rest[n..];
                if asm.take_record().is_none() && n == 0 {
                    panic!("assembler consumed nothing without a record");
                }
            }
            Err(_) => break,
        }
        step = step % 13 + 1;
    }
}

fn fattrs_of_arg(op: &ArgOp4<'_>) {
    if let ArgOp4::SetAttr(s) = op {
        if let Ok(a) = Attrs::from_fattr4(&s.obj_attributes) {
            let mut w = XdrWriter::new();
            a.encode_vals(None, &mut w);
            assert_eq!(w.len(), s.obj_attributes.attr_vals.0.len());
        }
    }
}

fn fattrs_of_res(op: &ResOp4<'_>) {
    if let ResOp4::GetAttr(duet_protocols::nfs::nfs4::Nfs4Res::Ok(ok)) = op {
        if let Ok(a) = Attrs::from_fattr4(&ok.obj_attributes) {
            let mut w = XdrWriter::new();
            a.encode_vals(None, &mut w);
            assert_eq!(w.len(), ok.obj_attributes.attr_vals.0.len());
        }
    }
}

#[test]
fn truncated_capture_records_never_panic() {
    let records = capture_records();
    let mut n = 0;
    for rec in &records {
        // Every 4-byte boundary and a few unaligned cuts.
        for cut in (0..rec.len())
            .step_by(4)
            .chain([1, 2, 3, rec.len().saturating_sub(1)])
        {
            decode_everything(&rec[..cut.min(rec.len())]);
            n += 1;
        }
    }
    assert!(n > 10_000, "{n} inputs");
}

#[test]
fn mutated_capture_records_never_panic() {
    let records = capture_records();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for _ in 0..20_000 {
        let rec = &records[rng.below(records.len())];
        decode_everything(&rng.mutate(rec));
    }
}

#[test]
fn pseudo_random_bytes_never_panic() {
    let mut rng = XorShift(0xD1B5_4A32_D192_ED03);
    for i in 0..20_000 {
        let words = rng.below(96);
        let buf = if i % 2 == 0 {
            rng.xdrish(words)
        } else {
            (0..words * 4).map(|_| rng.next() as u8).collect()
        };
        decode_everything(&buf);
    }
}

#[test]
fn pseudo_random_rpc_calls_never_panic() {
    // A valid RPC call header in front of random bodies reaches the
    // procedure decoders more often than raw noise.
    let mut rng = XorShift(42);
    let header: [u32; 10] = [7, 0, 2, 100003, 4, 1, 0, 0, 0, 0];
    for _ in 0..20_000 {
        let mut buf: Vec<u8> = header.iter().flat_map(|w| w.to_be_bytes()).collect();
        // tag "", minorversion 1 or 2, a small op count, then ops.
        buf.extend_from_slice(&0u32.to_be_bytes());
        buf.extend_from_slice(&(1 + rng.below(2) as u32).to_be_bytes());
        let nops = rng.below(6) as u32;
        buf.extend_from_slice(&nops.to_be_bytes());
        for _ in 0..nops {
            buf.extend_from_slice(&(rng.below(75) as u32).to_be_bytes());
            let words = rng.below(24);
            let body = rng.xdrish(words);
            buf.extend_from_slice(&body);
        }
        decode_everything(&buf);
    }
}

// ---- regression tests: named findings ----

#[test]
fn huge_array_count_does_not_allocate() {
    // A COMPOUND declaring u32::MAX operations in 16 bytes stops with
    // TooManyOps before anything is reserved.
    let mut buf = Vec::new();
    for w in [0u32, 1, u32::MAX] {
        buf.extend_from_slice(&w.to_be_bytes());
    }
    let args =
        Compound4Args::decode(&mut XdrReader::new(&buf), &CompoundLimits::default()).unwrap();
    assert!(args.stop.is_some());
    // A bitmap4 declaring 2^32-1 words is refused by its bound.
    assert!(Bitmap4::decode(&mut XdrReader::new(&u32::MAX.to_be_bytes())).is_err());
}
