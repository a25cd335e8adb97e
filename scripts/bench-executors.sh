#!/usr/bin/env bash
# bench-executors.sh: does duet scale with protocol executors? (issue 13)
#
# Starts, in the same run, two duetd on fresh data directories, one with
# `executors = 1` and one with `executors = 2` (more with EXECUTORS), and
# runs `duetctl bench` NFSv4.1 (and SMB) small-file create+write+close
# with 16 clients against each. Prints the table, the ratio of each to the
# one-executor daemon (goal: NFSv4.1 16-client create at least 1.5x with
# 2 executors), the CPUs of this machine and how each daemon spread its
# connections over its executors (`connections.by_executor` of
# `duetctl --json stats`). On a machine with fewer cores than executors
# plus the data executor the ratio says little: the figure is meant for a
# machine of 4 or more cores.
#
# Environment (defaults in brackets):
#   DUETD, CTL   binaries [target/release/* if built, else target/debug/*]
#   EXECUTORS    executor counts compared [1,2]   CLIENTS  [16]
#   FILES        files per client [200]           PROTOCOLS  [nfs4,smb]
#   OUT          JSON results prefix [target/bench-executors]
#   KEEP=1       keep the data directories and logs
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
EXECUTORS=${EXECUTORS:-1,2}
CLIENTS=${CLIENTS:-16}
FILES=${FILES:-200}
PROTOCOLS=${PROTOCOLS:-nfs4,smb}
OUT=${OUT:-$root/target/bench-executors}
if [ -x "$root/target/release/duetd" ] && [ -x "$root/target/release/duetctl" ]; then
  DUETD=${DUETD:-$root/target/release/duetd}; CTL=${CTL:-$root/target/release/duetctl}
else
  DUETD=${DUETD:-$root/target/debug/duetd}; CTL=${CTL:-$root/target/debug/duetctl}
fi
[ -x "$DUETD" ] && [ -x "$CTL" ] || { echo "bench-executors.sh: build first (cargo build --release -p duet-appliance -p duet-ctl)" >&2; exit 2; }
case "$DUETD" in *release*) build=release ;; *) build=debug ;; esac

work=$(mktemp -d /tmp/duet-bench-exec.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  [ "${KEEP:-0}" = 1 ] && echo "bench-executors.sh: data and logs kept in $work" || rm -rf "$work"
}
trap cleanup EXIT
ulimit -l unlimited 2>/dev/null || ulimit -l 65536 2>/dev/null || true
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

mkdir -p "$(dirname "$OUT")"
IFS=, read -ra counts <<< "$EXECUTORS"
for n in "${counts[@]}"; do
  d="$work/x$n"; mkdir -p "$d"
  admin=$(free_port); smb=$(free_port); nfs=$(free_port)
  cat > "$d/duetd.toml" <<CONF
data_dir = "$d/data"
executors = $n
[admin]
listen = "127.0.0.1:$admin"
[smb]
listen = "127.0.0.1:$smb"
[nfs]
listen = "127.0.0.1:$nfs"
portmap = false
CONF
  "$DUETD" --config "$d/duetd.toml" >/dev/null 2>"$d/duetd.log" &
  pid=$!; pids+=($pid)
  for _ in $(seq 1 600); do grep -q "duetd is serving" "$d/duetd.log" 2>/dev/null && break; sleep 0.1; done
  grep -q "duetd is serving" "$d/duetd.log" || { echo "bench-executors.sh: executors=$n does not serve:" >&2; tail -20 "$d/duetd.log" >&2; exit 1; }
  ctl=("$CTL" --addr "127.0.0.1:$admin" --data-dir "$d/data")
  "${ctl[@]}" user add bench --password benchpw >/dev/null
  "${ctl[@]}" share add bench --path /bench --no-root-squash >/dev/null
  sleep 2 # the protocol executors pick up new users and shares shortly after
  targets=()
  case ",$PROTOCOLS," in *,nfs4,*) targets+=("duet-x$n-nfs4=nfs4://127.0.0.1:$nfs/bench") ;; esac
  case ",$PROTOCOLS," in *,smb,*) targets+=("duet-x$n-smb=smb://bench:benchpw@127.0.0.1:$smb/bench") ;; esac
  echo "bench-executors.sh: executors = $n ..." >&2
  "${ctl[@]}" bench "${targets[@]}" --workloads smallfile --clients "$CLIENTS" --files "$FILES" --json-out "$OUT-x$n.json" --quiet
  "${ctl[@]}" --json stats > "$work/stats-x$n.json"
  # One daemon at a time: the other's threads would take its cores.
  kill "$pid"; wait "$pid" 2>/dev/null || true
done
echo
echo "bench-executors.sh: $build build, $(nproc) CPUs, $CLIENTS clients x $FILES files"
python3 - "$OUT" "$work" "$EXECUTORS" <<'PY'
import json, sys
out, work, counts = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
rows = {}
for n in counts:
    for r in json.load(open(f"{out}-x{n}.json"))["results"]:
        if r["workload"] == "smallfile-create":
            proto = r["target"].rsplit("-", 1)[1]
            rows[(proto, n)] = r
print("\n| protocol | executors | creates/s | p50 µs | p99 µs | vs 1 executor | connections per executor |\n|---|---|---|---|---|---|---|")
goals = []
for proto in ("nfs4", "smb"):
    base = rows.get((proto, counts[0]))
    for n in counts:
        r = rows.get((proto, n))
        if not r:
            continue
        st = json.load(open(f"{work}/stats-x{n}.json"))
        key = "accepted_nfs" if proto == "nfs4" else "accepted_smb"
        spread = "/".join(str(e[key]) for e in st["connections"].get("by_executor", []))
        x = r["ops_per_s"] / base["ops_per_s"] if base else float("nan")
        print(f"| {proto} | {n} | {r['ops_per_s']:.0f} | {r['p50_us']} | {r['p99_us']} | {x:.2f}x | {spread} |")
        if proto == "nfs4" and n == 2 and base:
            goals.append(("NFSv4.1 16-client create, 2 executors / 1 (want >= 1.5x)", f"{x:.2f}x", "met" if x >= 1.5 else "**not met**"))
print("\n| goal | got | |\n|---|---|---|")
for g in goals:
    print(f"| {g[0]} | {g[1]} | {g[2]} |")
PY
