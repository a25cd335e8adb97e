#!/usr/bin/env python3
"""Prints the goals table of docs/benchmarks.md from duetctl bench JSON.
Usage: bench_goals.py results.json vcopy-5ms.json"""
import json, sys

res = json.load(open(sys.argv[1]))["results"]
vc = json.load(open(sys.argv[2]))["extra"].get("vcopy", []) if len(sys.argv) > 2 else []

def fig(t, w, c):
    for r in res:
        if r["target"] == t and r["workload"] == w and r["clients"] == c:
            return r["mb_per_s"] if w.startswith("seq-") else r["ops_per_s"]
    return None

rows = []
def goal(name, want, got):
    ok = got is not None and got >= want
    rows.append((name, f">= {want}x", "n/a" if got is None else f"{got:.2f}x", "met" if ok else "**not met**"))

def ratio(a, b):
    return None if a is None or not b else a / b

clients = sorted({r["clients"] for r in res if r["workload"] == "smallfile-create"})
for c in clients:
    goal(f"SMB small-file create+write+close, {c} client(s): duet / Samba", 3, ratio(fig("duet-smb", "smallfile-create", c), fig("samba", "smallfile-create", c)))
for c in clients:
    goal(f"NFSv4.1 small-file create+write+close, {c} client(s): duet / Ganesha", 2, ratio(fig("duet-nfs", "smallfile-create", c), fig("ganesha", "smallfile-create", c)))
ls = sorted({r["workload"] for r in res if r["workload"].startswith("ls-l-")})
for w in ls:
    goal(f"`ls -l` ({w[5:]} entries, 1 client): duet SMB / Samba", 2, ratio(fig("duet-smb", w, 1), fig("samba", w, 1)))
    goal(f"`ls -l` ({w[5:]} entries, 1 client): duet NFS / Ganesha", 2, ratio(fig("duet-nfs", w, 1), fig("ganesha", w, 1)))
for w in ("seq-write", "seq-read"):
    peers = [x for x in (fig("samba", w, 1), fig("ganesha", w, 1)) if x is not None]
    best = max(peers) if peers else None
    duet = max([x for x in (fig("duet-smb", w, 1), fig("duet-nfs", w, 1)) if x is not None], default=None)
    goal(f"sequential {w[4:]} (MB/s): best duet protocol / best peer", 1, ratio(duet, best))
for v in vc:
    goal(f"vectorised copy of {v['files']} files at +{v['latency_ms']} ms: speed-up over one at a time", 20, v["speedup"])

print("| goal | wanted | got | |\n|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(r) + " |")
