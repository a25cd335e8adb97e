//! Round-trip tests over real NFSv4.1 and v4.2 traffic: Linux 6.1 against
//! NFS-Ganesha 4.3 (/work/shared/captures, extracted into testdata/nfs).
//! Every record decodes, and re-encoding it gives the same bytes.

use std::collections::HashMap;
use std::path::PathBuf;

use duet_protocols::nfs::nfs4::attrs::Attrs;
use duet_protocols::nfs::nfs4::{
    opnum, ArgOp4, Compound4Args, Compound4Res, CompoundLimits, Fattr4, Nfs4Res, ResOp4,
    NFSPROC4_COMPOUND, NFSPROC4_NULL,
};
use duet_protocols::nfs::rpc::{CallBody, ReplyHeader, PROGRAM_NFS};
use duet_protocols::nfs::xdr::{XdrDecode, XdrEncode, XdrReader, XdrWriter};

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/nfs")
        .join(name)
}

fn unhex(s: &str) -> Vec<u8> {
    let s = s.trim();
    assert!(s.len() & 1 == 0, "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

/// One record per non-comment line.
fn records(name: &str) -> Vec<Vec<u8>> {
    let text = std::fs::read_to_string(testdata(name)).expect("testdata file");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(unhex)
        .collect()
}

/// A record stored as `prefix`, `zeros N`, `suffix` lines.
fn compressed_record(name: &str) -> Vec<u8> {
    let text = std::fs::read_to_string(testdata(name)).expect("testdata file");
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        match line.split_once(' ') {
            Some(("prefix", h)) | Some(("suffix", h)) => out.extend(unhex(h)),
            Some(("zeros", n)) => out.resize(out.len() + n.parse::<usize>().unwrap(), 0),
            _ => {}
        }
    }
    out
}

/// Checks that every fattr4 parses with the attribute codec and that
/// re-encoding the values gives the same bytes.
fn check_fattr4(f: &Fattr4<'_>) {
    let attrs = Attrs::from_fattr4(f)
        .unwrap_or_else(|e| panic!("attrs {:?} do not parse: {e}", f.attrmask));
    let mut w = XdrWriter::new();
    let mask = attrs.encode_vals(None, &mut w);
    assert_eq!(mask, f.attrmask, "bitmap re-derived from values");
    assert_eq!(w.as_bytes(), f.attr_vals.0, "attr_vals round trip");
    let mut w2 = XdrWriter::new();
    attrs.encode_fattr4(None, &mut w2);
    let mut w3 = XdrWriter::new();
    f.encode(&mut w3);
    assert_eq!(w2.as_bytes(), w3.as_bytes(), "whole fattr4 round trip");
}

fn check_call_fattrs(args: &Compound4Args<'_>) {
    for op in &args.ops {
        match op {
            ArgOp4::SetAttr(a) => check_fattr4(&a.obj_attributes),
            ArgOp4::Verify(a) | ArgOp4::NVerify(a) => check_fattr4(&a.obj_attributes),
            ArgOp4::Create(a) => check_fattr4(&a.createattrs),
            ArgOp4::Open(a) => {
                use duet_protocols::nfs::nfs4::{CreateHow4, OpenFlag4};
                if let OpenFlag4::Create(how) = &a.openhow {
                    match how {
                        CreateHow4::Unchecked(f) | CreateHow4::Guarded(f) => check_fattr4(f),
                        CreateHow4::Exclusive41(c) => check_fattr4(&c.cva_attrs),
                        CreateHow4::Exclusive(_) => {}
                    }
                }
            }
            _ => {}
        }
    }
}

fn check_reply_fattrs(res: &Compound4Res<'_>) -> usize {
    let mut n = 0;
    for r in &res.results {
        match r {
            ResOp4::GetAttr(Nfs4Res::Ok(ok)) => {
                check_fattr4(&ok.obj_attributes);
                n += 1;
            }
            ResOp4::ReadDir(Nfs4Res::Ok(ok)) => {
                for e in &ok.reply.entries.0 {
                    check_fattr4(&e.attrs);
                    n += 1;
                }
            }
            _ => {}
        }
    }
    n
}

/// Decodes one call record, checks the round trip, returns (xid, proc, ops).
fn roundtrip_call(rec: &[u8]) -> (u32, u32, Vec<u32>) {
    let mut r = XdrReader::new(rec);
    let call = CallBody::decode(&mut r).expect("call header");
    assert_eq!(call.prog, PROGRAM_NFS);
    assert_eq!(call.vers, 4);
    let mut w = XdrWriter::new();
    call.encode(&mut w);
    let ops = match call.proc_ {
        NFSPROC4_NULL => {
            r.finish().expect("NULL has no arguments");
            vec![]
        }
        NFSPROC4_COMPOUND => {
            let args =
                Compound4Args::decode(&mut r, &CompoundLimits::default()).expect("compound header");
            assert_eq!(args.stop, None, "every operation decodes: {:?}", args.ops);
            check_call_fattrs(&args);
            args.encode(&mut w);
            args.ops.iter().map(|o| o.opnum()).collect()
        }
        p => panic!("unexpected procedure {p}"),
    };
    assert_eq!(w.as_bytes(), rec, "call xid {:#x} round trip", call.xid);
    (call.xid, call.proc_, ops)
}

/// Decodes one reply record, checks the round trip, returns (xid, ops,
/// fattr4 count).
fn roundtrip_reply(rec: &[u8], procs: &HashMap<u32, u32>) -> (u32, Vec<u32>, usize) {
    let mut r = XdrReader::new(rec);
    let reply = ReplyHeader::decode(&mut r).expect("reply header");
    let mut w = XdrWriter::new();
    reply.encode(&mut w);
    let proc_ = procs.get(&reply.xid).copied().unwrap_or(NFSPROC4_COMPOUND);
    let (ops, nattrs) = match proc_ {
        NFSPROC4_NULL => {
            r.finish().expect("NULL has no results");
            (vec![], 0)
        }
        _ => {
            let res = Compound4Res::decode(&mut r, 1024).expect("compound results");
            let n = check_reply_fattrs(&res);
            res.encode(&mut w);
            (res.results.iter().map(|o| o.opnum()).collect(), n)
        }
    };
    assert_eq!(w.as_bytes(), rec, "reply xid {:#x} round trip", reply.xid);
    (reply.xid, ops, nattrs)
}

fn roundtrip_capture(prefix: &str) -> (Vec<Vec<u32>>, usize) {
    let calls = records(&format!("{prefix}_calls.hex"));
    let replies = records(&format!("{prefix}_replies.hex"));
    assert!(calls.len() > 100 && replies.len() > 100);
    let mut procs = HashMap::new();
    let mut seen = Vec::new();
    for rec in &calls {
        let (xid, proc_, ops) = roundtrip_call(rec);
        procs.insert(xid, proc_);
        seen.push(ops);
    }
    let big = compressed_record(&format!("{prefix}_write_1mib_call.hex"));
    assert_eq!(big.len(), 1_048_780);
    let (xid, proc_, ops) = roundtrip_call(&big);
    procs.insert(xid, proc_);
    assert!(ops.contains(&opnum::WRITE));
    let mut nattrs = 0;
    for rec in &replies {
        let (_, ops, n) = roundtrip_reply(rec, &procs);
        nattrs += n;
        seen.push(ops);
    }
    (seen, nattrs)
}

#[test]
fn nfs41_capture_round_trips() {
    let (seen, nattrs) = roundtrip_capture("v41");
    assert!(nattrs > 50, "parsed {nattrs} fattr4 values");
    for want in [
        opnum::EXCHANGE_ID,
        opnum::CREATE_SESSION,
        opnum::SEQUENCE,
        opnum::PUTROOTFH,
        opnum::GETATTR,
        opnum::OPEN,
        opnum::WRITE,
        opnum::CLOSE,
        opnum::READDIR,
    ] {
        assert!(
            seen.iter().any(|ops| ops.contains(&want)),
            "capture has op {want}"
        );
    }
}

#[test]
fn nfs42_capture_round_trips() {
    let (seen, nattrs) = roundtrip_capture("v42");
    assert!(nattrs > 50, "parsed {nattrs} fattr4 values");
    assert!(seen.iter().any(|ops| ops.contains(&opnum::SEQUENCE)));
}

#[test]
#[ignore = "prints the operations of every record; run with --ignored --nocapture"]
fn print_capture_ops() {
    for prefix in ["v41", "v42"] {
        for kind in ["calls", "replies"] {
            for (i, rec) in records(&format!("{prefix}_{kind}.hex")).iter().enumerate() {
                let mut r = XdrReader::new(rec);
                if kind == "calls" {
                    let call = CallBody::decode(&mut r).unwrap();
                    let ops = Compound4Args::decode(&mut r, &CompoundLimits::default())
                        .map(|a| a.ops.iter().map(|o| o.opnum()).collect::<Vec<_>>());
                    println!("{prefix} call {i:3} xid {:#010x} {:?}", call.xid, ops);
                } else {
                    let rep = ReplyHeader::decode(&mut r).unwrap();
                    let res = Compound4Res::decode(&mut r, 1024).map(|res| {
                        res.results
                            .iter()
                            .map(|o| (o.opnum(), o.status().0))
                            .collect::<Vec<_>>()
                    });
                    println!("{prefix} reply {i:3} xid {:#010x} {:?}", rep.xid, res);
                }
            }
        }
    }
}
