#!/usr/bin/env python3
"""Seed corpora from the captures in ../shared/captures and the hex test
vectors in protocols/testdata. Writes fuzz/corpus/<target>/seed-*.

    python3 fuzz/seeds/extract.py [CAPTURES_DIR]

The generated sessions (logged-on SMB compounds, NFSv4 sessions, NFSv3)
come from `cargo run --example seeds` in fuzz/.
"""
import hashlib, os, struct, subprocess, sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CAPS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared", "captures")
OUT = os.path.join(ROOT, "fuzz", "corpus")
MAX = 64 << 10  # larger inputs only slow the fuzzers down

SMB_MODE_TREE, SMB_REWRITE = 2, 4


def put(target, data):
    if len(data) > MAX or not data:
        return
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    name = "seed-" + hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def streams(cap, port):
    """{(stream, to_server): bytes} from a capture."""
    out = subprocess.run(
        ["tshark", "-r", cap, "-Y", "tcp.len>0", "-T", "fields", "-e", "tcp.stream", "-e", "tcp.dstport", "-e", "tcp.payload"],
        capture_output=True, text=True, check=True).stdout
    s = defaultdict(bytearray)
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or not parts[2]:
            continue
        s[(int(parts[0]), parts[1] == str(port))] += bytes.fromhex(parts[2].replace(":", ""))
    return s


def smb_frames(b):
    out, i = [], 0
    while i + 4 <= len(b):
        n = struct.unpack(">I", b"\0" + bytes(b[i + 1:i + 4]))[0]
        out.append(bytes(b[i:i + 4 + n]))
        i += 4 + n
    return out


def rpc_records(b):
    """Whole records, record marking included."""
    out, i, start = [], 0, 0
    while i + 4 <= len(b):
        m = struct.unpack(">I", bytes(b[i:i + 4]))[0]
        i += 4 + (m & 0x7fffffff)
        if m & 0x80000000:
            out.append(bytes(b[start:i]))
            start = i
    return out


def smb_messages(frame):
    i = 0
    while i + 64 <= len(frame):
        nxt = struct.unpack("<I", frame[i + 20:i + 24])[0]
        yield frame[i:i + nxt] if nxt else frame[i:]
        if not nxt:
            break
        i += nxt


def sec_buffers(msg):
    if len(msg) < 72 or msg[:4] != b"\xfeSMB":
        return
    cmd = struct.unpack("<H", msg[12:14])[0]
    resp = struct.unpack("<I", msg[16:20])[0] & 1
    at = {(0, 1): 64 + 56, (1, 0): 64 + 12, (1, 1): 64 + 4}.get((cmd, resp))
    if at is None or len(msg) < at + 4:
        return
    off, ln = struct.unpack("<HH", msg[at:at + 4])
    if ln and off + ln <= len(msg):
        yield msg[off:off + ln]


def hexfile(p):
    text = open(p).read()
    return bytes.fromhex("".join(l for l in text.splitlines() if not l.startswith("#")).replace(" ", ""))


def main():
    # SMB captures.
    for cap in ["linux-cifs-3.1.1-vs-samba.pcapng", "smbclient-vs-samba.pcapng"]:
        for (st, to_server), b in streams(os.path.join(CAPS, cap), 1445).items():
            frames = smb_frames(b)
            for f in frames:
                put("smb2_decode", f[4:])
                for m in smb_messages(f[4:]):
                    for sb in sec_buffers(m):
                        put("ntlmssp_spnego", sb)
            if to_server:
                # The real logon sequence on a fresh connection...
                put("smb2_conn", bytes([0]) + b"".join(frames[:12]))
                # ...and each later request on a logged-on one.
                for f in frames[6:]:
                    put("smb2_conn", bytes([SMB_MODE_TREE | SMB_REWRITE]) + f)
    # NFS captures.
    for cap in ["linux-nfs-4.1-vs-ganesha.pcapng", "linux-nfs-4.2-vs-ganesha.pcapng"]:
        for (st, to_server), b in streams(os.path.join(CAPS, cap), 12049).items():
            recs = rpc_records(b)
            for r in recs:
                put("rpc_xdr", bytes([len(r) & 0xff]) + r)
            put("rpc_xdr", bytes([7]) + b"".join(recs[:8]))
            if to_server:
                put("nfs4_session", bytes([0]) + b"".join(recs[:12]))
                for r in recs[12:]:
                    put("nfs4_session", bytes([0]) + r)
    # Hex test vectors.
    tdir = os.path.join(ROOT, "protocols", "testdata")
    for name in sorted(os.listdir(os.path.join(tdir, "smb2"))):
        if name.endswith(".hex"):
            f = hexfile(os.path.join(tdir, "smb2", name))
            put("smb2_decode", f)
            for m in smb_messages(f):
                for sb in sec_buffers(m):
                    put("ntlmssp_spnego", sb)
    for name in sorted(os.listdir(os.path.join(tdir, "nfs"))):
        if name.endswith(".hex"):
            for line in open(os.path.join(tdir, "nfs", name)):
                line = line.strip()
                if line and not line.startswith("#"):
                    try:
                        r = bytes.fromhex(line)
                    except ValueError:
                        continue
                    put("rpc_xdr", bytes([3]) + struct.pack(">I", 0x80000000 | len(r)) + r)


main()
