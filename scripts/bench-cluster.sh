#!/usr/bin/env bash
# bench-cluster.sh: the replication benchmark of issue 12, one command.
#
# Starts, in the same run: Samba (../shared/peers/start, 127.0.0.1:1445),
# a single duetd on 127.0.0.1, and a three-node cluster on 127.0.0.11-13
# (one machine, loopback addresses, the same ports); then `duetctl bench`
# SMB small-file create+write+close against the single node, the cluster's
# leader, one of its followers (which forwards every batch to the leader)
# and Samba, at 1 and 16 clients. Prints the goals (16-client create on the
# cluster at least 2x Samba; 1-client create latency p50 at most 2x the
# single node's) and what replication cost per batch: raft proposals,
# frames and bytes each node sent to its peers, and fsyncs on each node,
# from the nodes' /metrics before and after the bench.
#
# Environment (defaults in brackets):
#   DUETD, CTL   binaries [target/release/* if built, else target/debug/*]
#   CLIENTS      client counts [1,16]     FILES   files per client [200]
#   PEERS        path to the peers scripts [../shared/peers]
#   OUT          where to write the JSON results [target/bench-cluster.json]
#   KEEP=1       keep the data directories and logs
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
PEERS=${PEERS:-$root/../shared/peers}
[ -x "$PEERS/start" ] || PEERS=/work/shared/peers
CLIENTS=${CLIENTS:-1,16}
FILES=${FILES:-200}
OUT=${OUT:-$root/target/bench-cluster.json}
if [ -x "$root/target/release/duetd" ] && [ -x "$root/target/release/duetctl" ]; then
  DUETD=${DUETD:-$root/target/release/duetd}; CTL=${CTL:-$root/target/release/duetctl}
else
  DUETD=${DUETD:-$root/target/debug/duetd}; CTL=${CTL:-$root/target/debug/duetctl}
fi
[ -x "$DUETD" ] && [ -x "$CTL" ] || { echo "bench-cluster.sh: build first (cargo test --workspace --no-run)" >&2; exit 2; }
case "$DUETD" in *release*) build=release ;; *) build=debug ;; esac

"$PEERS/start" >/dev/null
work=$(mktemp -d /tmp/duet-bench-cluster.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  "$PEERS/stop" >/dev/null 2>&1 || true
  [ "${KEEP:-0}" = 1 ] && echo "bench-cluster.sh: data and logs kept in $work" || rm -rf "$work"
}
trap cleanup EXIT
ulimit -l unlimited 2>/dev/null || ulimit -l 65536 2>/dev/null || true

# A port free on every address given.
free_port() {
  python3 - "$@" <<'PY'
import socket, sys
for _ in range(100):
    s = socket.socket(); s.bind((sys.argv[1], 0)); port = s.getsockname()[1]; held = [s]
    try:
        for h in sys.argv[2:]:
            t = socket.socket(); t.bind((h, port)); held.append(t)
        print(port); break
    except OSError:
        pass
PY
}
hosts="127.0.0.11 127.0.0.12 127.0.0.13"
admin=$(free_port $hosts); smb=$(free_port $hosts); nfs=$(free_port $hosts); peer=$(free_port $hosts)
head -c 48 /dev/urandom > "$work/secret"
list="\"1@127.0.0.11:$peer\", \"2@127.0.0.12:$peer\", \"3@127.0.0.13:$peer\""
start() { # name host cluster-section
  mkdir -p "$work/$1"
  cat > "$work/$1/duetd.toml" <<CONF
data_dir = "$work/$1/data"
node_id = ${4:-1}
[admin]
listen = "$2:$admin"
[smb]
listen = "$2:$smb"
[nfs]
listen = "$2:$nfs"
portmap = false
$3
CONF
  "$DUETD" --config "$work/$1/duetd.toml" >/dev/null 2>"$work/$1/duetd.log" &
  pids+=($!)
}
start single 127.0.0.1 ""
for i in 1 2 3; do
  start "n$i" "127.0.0.1$i" "[cluster]
listen = \"127.0.0.1$i:$peer\"
peers = [$list]
secret_file = \"$work/secret\"" "$i"
done
ctl() { local d=$1; shift; "$CTL" --addr "$(sed -n 's/^listen = "\(.*:'"$admin"'\)"/\1/p' "$work/$d/duetd.toml")" --data-dir "$work/$d/data" "$@"; }
wait_serving() { for _ in $(seq 1 600); do grep -q "duetd is serving" "$work/$1/duetd.log" 2>/dev/null && return 0; sleep 0.1; done; echo "bench-cluster.sh: $1 does not serve:" >&2; tail -20 "$work/$1/duetd.log" >&2; exit 1; }
for d in single n1 n2 n3; do wait_serving "$d"; done
leader=""
for _ in $(seq 1 300); do
  leader=$(ctl n1 --json cluster status 2>/dev/null | python3 -c 'import json,sys; l=json.load(sys.stdin)["leader"]; print(l or "")' || true)
  [ -n "$leader" ] && break
  sleep 0.1
done
[ -n "$leader" ] || { echo "bench-cluster.sh: no leader" >&2; exit 1; }
follower=$(( leader % 3 + 1 ))
for d in single "n$leader"; do
  ctl "$d" user add bench --password benchpw >/dev/null
  ctl "$d" share add bench --path /bench --no-root-squash >/dev/null
done
# The follower's runs go to a share of their own (same cluster, same leader).
ctl "n$leader" share add bench2 --path /bench2 --no-root-squash >/dev/null
sleep 2 # the protocol executors pick up new users and shares shortly after

metrics() { # node -> one JSON object of the series summed by name
  curl -s "http://127.0.0.1$1:$admin/metrics" | python3 -c '
import json, sys, re
out = {}
for line in sys.stdin:
    if line.startswith("#") or not line.strip():
        continue
    m = re.match(r"([a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$", line.strip())
    if m:
        out[m.group(1)] = out.get(m.group(1), 0) + float(m.group(3))
print(json.dumps(out))'
}
for i in 1 2 3; do metrics "$i" > "$work/before-$i.json"; done
targets=(
  "duet-single=smb://bench:benchpw@127.0.0.1:$smb/bench"
  "duet-leader=smb://bench:benchpw@127.0.0.1$leader:$smb/bench"
  "duet-follower=smb://bench:benchpw@127.0.0.1$follower:$smb/bench2"
  "samba=smb://bench:benchpw@127.0.0.1:1445/share"
)
t0=$(date +%s)
ctl single bench "${targets[@]}" --workloads smallfile --clients "$CLIENTS" --files "$FILES" --json-out "$OUT" --quiet
t1=$(date +%s)
for i in 1 2 3; do metrics "$i" > "$work/after-$i.json"; done
fs_ms=$(dd if=/dev/zero of="$work/fsync-probe" bs=4k count=200 oflag=dsync 2>&1 | awk '/copied/ {for (i=1;i<=NF;i++) if ($i ~ /^s,?$/) s=$(i-1); printf "%.2f", s*1000/200}')
echo
echo "bench-cluster.sh: $build build, $(nproc) CPUs, bench $((t1 - t0)) s; leader node $leader, follower node $follower; one 4 KiB O_DSYNC write ${fs_ms} ms"
python3 - "$OUT" "$work" "$leader" <<'PY'
import json, sys
res = json.load(open(sys.argv[1]))["results"]
work, leader = sys.argv[2], int(sys.argv[3])
def row(t, w, c):
    return next((r for r in res if r["target"] == t and r["workload"] == w and r["clients"] == c), None)
print("\n| target | clients | creates/s | p50 µs | p99 µs |\n|---|---|---|---|---|")
for r in res:
    if r["workload"] == "smallfile-create":
        print(f"| {r['target']} | {r['clients']} | {r['ops_per_s']:.0f} | {r['p50_us']} | {r['p99_us']} |")
goals = []
def goal(name, ok, got):
    goals.append((name, got, "met" if ok else "**not met**"))
cs = sorted({r["clients"] for r in res if r["workload"] == "smallfile-create"})
hi, lo = max(cs), min(cs)
samba = row("samba", "smallfile-create", hi)
single = row("duet-single", "smallfile-create", lo)
for t in ("duet-leader", "duet-follower"):
    r = row(t, "smallfile-create", hi)
    if r and samba:
        x = r["ops_per_s"] / samba["ops_per_s"]
        goal(f"{hi}-client create on the cluster via the {t[5:]}: / Samba (want >= 2x)", x >= 2, f"{x:.2f}x")
    r = row(t, "smallfile-create", lo)
    if r and single:
        x = r["p50_us"] / max(single["p50_us"], 1)
        goal(f"{lo}-client create p50 via the {t[5:]}: / single node (want <= 2x)", x <= 2, f"{x:.2f}x")
print("\n| goal | got | |\n|---|---|---|")
for g in goals:
    print(f"| {g[0]} | {g[1]} | {g[2]} |")
before = [json.load(open(f"{work}/before-{i}.json")) for i in (1, 2, 3)]
after = [json.load(open(f"{work}/after-{i}.json")) for i in (1, 2, 3)]
d = lambda i, k: after[i].get(k, 0) - before[i].get(k, 0)
batches = d(leader - 1, "duet_proposals_total")
print(f"\nReplication cost per raft proposal ({batches:.0f} proposals on the leader during the bench):\n")
print("| node | role | frames sent | bytes sent | fsyncs (all volumes) |\n|---|---|---|---|---|")
for i in range(3):
    role = "leader" if i + 1 == leader else "follower"
    per = lambda k: d(i, k) / batches if batches else float("nan")
    print(f"| {i + 1} | {role} | {per('duet_peer_sent_frames_total'):.2f} | {per('duet_peer_sent_bytes_total'):.0f} | {per('duet_fsyncs_total'):.2f} |")
PY
