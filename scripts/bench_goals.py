#!/usr/bin/env python3
"""Prints the goals table of docs/benchmarks.md from duetctl bench JSON.

Usage: bench_goals.py results.json [vcopy.json] [--protocol results-protocol.json]
                      [--fsync-ms MS] [--rtt-ms MS]

results.json is the run against duet's `always` share (the default
durability), results-protocol.json the run against a `protocol` share
(docs/durability.md), each with the peers measured in the same run. The
floor column is what one request of that kind cannot go below on this
machine: one loopback round trip, plus one fdatasync where duet's reply
waits for one (a change on an `always` share; an NFS FILE_SYNC write on
any share)."""
import argparse, json

ap = argparse.ArgumentParser()
ap.add_argument("results")
ap.add_argument("vcopy", nargs="?")
ap.add_argument("--protocol")
ap.add_argument("--fsync-ms", type=float)
ap.add_argument("--rtt-ms", type=float)
a = ap.parse_args()

res = json.load(open(a.results))["results"]
vc = json.load(open(a.vcopy))["extra"].get("vcopy", []) if a.vcopy else []
pres = json.load(open(a.protocol))["results"] if a.protocol else []


def row(rs, t, w, c):
    for r in rs:
        if r["target"] == t and r["workload"] == w and r["clients"] == c:
            return r
    return None


def fig(rs, t, w, c):
    r = row(rs, t, w, c)
    if r is None:
        return None
    return r["mb_per_s"] if w.startswith("seq-") else r["ops_per_s"]


def floor(synced):
    """The floor of one request's latency, as text."""
    if a.rtt_ms is None:
        return ""
    ms = a.rtt_ms + ((a.fsync_ms or 0.0) if synced else 0.0)
    what = "round trip + fdatasync" if synced else "round trip"
    return f"{ms:.3f} ms ({what})"


rows = []


def goal(name, want, got, p50=None, synced=None):
    """`synced`: None when no one-request floor applies (a listing of
    many requests, a stream), else whether duet's reply waits for a sync."""
    ok = got is not None and got >= want
    lat = "" if p50 is None else f"{p50 / 1000:.3f} ms"
    rows.append((name, f">= {want}x", "n/a" if got is None else f"{got:.2f}x", "met" if ok else "**not met**", lat, "" if synced is None else floor(synced)))


def ratio(x, y):
    return None if x is None or not y else x / y


def p50(rs, t, w, c):
    r = row(rs, t, w, c)
    return None if r is None else r["p50_us"]


def best_of(rs, w, c, duets):
    """(best duet figure, its target, its p50, best peer figure)."""
    d = [(fig(rs, t, w, c), t) for t in duets]
    d = [x for x in d if x[0] is not None]
    peers = [x for x in (fig(rs, "samba", w, c), fig(rs, "ganesha", w, c)) if x is not None]
    if not d:
        return None, None, None, max(peers) if peers else None
    f, t = max(d)
    return f, t, p50(rs, t, w, c), max(peers) if peers else None


clients = sorted({r["clients"] for r in res if r["workload"] == "smallfile-create"})
for c in clients:
    goal(f"SMB small-file create+write+close, {c} client(s): duet / Samba", 3,
         ratio(fig(res, "duet-smb", "smallfile-create", c), fig(res, "samba", "smallfile-create", c)),
         p50(res, "duet-smb", "smallfile-create", c), synced=True)
for c in clients:
    goal(f"NFSv4.1 small-file create+write+close, {c} client(s): duet / Ganesha", 2,
         ratio(fig(res, "duet-nfs", "smallfile-create", c), fig(res, "ganesha", "smallfile-create", c)),
         p50(res, "duet-nfs", "smallfile-create", c), synced=True)
if pres:
    pclients = sorted({r["clients"] for r in pres if r["workload"] == "smallfile-create"})
    for c in pclients:
        goal(f"SMB small-file create+write+close, {c} client(s), `protocol` share: duet / Samba", 3,
             ratio(fig(pres, "duet-smb-protocol", "smallfile-create", c), fig(pres, "samba", "smallfile-create", c)),
             p50(pres, "duet-smb-protocol", "smallfile-create", c), synced=False)
ls = sorted({r["workload"] for r in res if r["workload"].startswith("ls-l-")})
for w in ls:
    goal(f"`ls -l` ({w[5:]} entries, 1 client): duet SMB / Samba", 2, ratio(fig(res, "duet-smb", w, 1), fig(res, "samba", w, 1)), p50(res, "duet-smb", w, 1))
    goal(f"`ls -l` ({w[5:]} entries, 1 client): duet NFS / Ganesha", 2, ratio(fig(res, "duet-nfs", w, 1), fig(res, "ganesha", w, 1)), p50(res, "duet-nfs", w, 1))
for w in ("seq-write", "seq-read"):
    d, _, _, best = best_of(res, w, 1, ("duet-smb", "duet-nfs"))
    goal(f"sequential {w[4:]} (MB/s): best duet protocol / best peer", 1, ratio(d, best))
    if pres:
        d, _, _, best = best_of(pres, w, 1, ("duet-smb-protocol", "duet-nfs-protocol"))
        goal(f"sequential {w[4:]} (MB/s), `protocol` share: best duet protocol / best peer", 1, ratio(d, best))
rclients = sorted({r["clients"] for r in res if r["workload"] == "rand-read-4k"})
for w, what in (("rand-read-4k", "read"), ("rand-write-4k", "write")):
    for c in rclients:
        d, _, lat, best = best_of(res, w, c, ("duet-smb", "duet-nfs"))
        goal(f"random 4 KiB {what}, {c} client(s): best duet protocol / best peer", 1, ratio(d, best), lat, synced=w == "rand-write-4k")
    if pres:
        for c in sorted({r["clients"] for r in pres if r["workload"] == w}):
            d, t, lat, best = best_of(pres, w, c, ("duet-smb-protocol", "duet-nfs-protocol"))
            # The NFS bench client writes FILE_SYNC: synced on any share.
            synced = w == "rand-write-4k" and (t or "").startswith("duet-nfs")
            goal(f"random 4 KiB {what}, {c} client(s), `protocol` share: best duet protocol / best peer", 1, ratio(d, best), lat, synced=synced)
for v in vc:
    goal(f"vectorised copy of {v['files']} files at +{v['latency_ms']} ms: speed-up over one at a time", 20, v["speedup"])

print("| goal | wanted | got | | duet p50 | floor |\n|---|---|---|---|---:|---|")
for r in rows:
    print("| " + " | ".join(r) + " |")
