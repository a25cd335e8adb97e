#!/usr/bin/env bash
# bench-layers.sh: what a snapshot and a writable clone cost, on a share of
# 10 files and on one of LAYERS_FILES (100,000) files, in one run (issue 15:
# "creating each on a share of 100,000 files costs the same as on a share
# of 10 files"). Starts a duetd of its own (DUETD / CTL, default
# target/debug: no build here), fills two shares through smbclient (mput of
# empty files, LAYERS_PARALLEL processes into subdirectories), then for
# each share takes LAYERS_ROUNDS (5) snapshots and as many clones and
# prints a Markdown table: the median duetctl round trip (process start
# included), and the metadata each wrote (RocksDB writes and raft
# proposals from `duetctl --json stats`, measured once the daemon is idle
# before and after), with the ratio big : small. A last line says whether
# the snapshot and clone of the big share list every file (NFSv3
# `.snapshot` is not needed: `duetctl --json share list` and a smbclient
# `ls` of the clone's last subdirectory).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
FILES=${LAYERS_FILES:-100000}
PARALLEL=${LAYERS_PARALLEL:-4}
ROUNDS=${LAYERS_ROUNDS:-5}
DUETD=${DUETD:-$root/target/debug/duetd}
CTL=${CTL:-$root/target/debug/duetctl}
work=$(mktemp -d /tmp/duet-layers.XXXXXX)
pid=
cleanup() {
  [ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ADMIN=127.0.0.1:$(free_port); SMB_PORT=$(free_port); DATA_DIR=$work/data
cat > "$work/duetd.toml" <<CONF
data_dir = "$DATA_DIR"
[admin]
listen = "$ADMIN"
[smb]
listen = "127.0.0.1:$SMB_PORT"
[nfs]
enabled = false
listen = "127.0.0.1:0"
portmap = false
CONF
"$DUETD" --config "$work/duetd.toml" >"$work/duetd.out" 2>"$work/duetd.log" &
pid=$!
for _ in $(seq 1 300); do ss -ltn | grep -q ":$SMB_PORT " && ss -ltn | grep -q ":${ADMIN##*:} " && break; sleep 0.1; done
ctl() { "$CTL" --addr "$ADMIN" --data-dir "$DATA_DIR" "$@"; }
ctl user add bench --password benchpw >/dev/null
# `protocol` durability only makes the fill faster; snapshots and clones
# are admin commands, synced either way.
ctl share add small --path /small --no-root-squash --durability protocol >/dev/null
ctl share add big --path /big --no-root-squash --durability protocol >/dev/null
sleep 2

# Fill: N empty files in PARALLEL subdirectories, one smbclient each.
fill() { # share files
  local share=$1 n=$2 per dirs=$PARALLEL
  [ "$n" -lt "$PARALLEL" ] && dirs=1
  per=$(( (n + dirs - 1) / dirs ))
  local t0=$SECONDS pids=()
  for d in $(seq 0 $((dirs - 1))); do
    local src=$work/src-$share-$d
    mkdir -p "$src"
    python3 - "$src" "$per" "$d" "$n" <<'PY'
import os, sys
src, per, d, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for i in range(d * per, min(n, (d + 1) * per)):
    open(os.path.join(src, f"f{i:06}"), "w").close()
PY
    ( cd "$src" && smbclient "//127.0.0.1/$share" -p "$SMB_PORT" -U bench%benchpw -m SMB3 \
        -c "mkdir d$d; cd d$d; prompt off; mput *" >"$work/fill-$share-$d.log" 2>&1 ) &
    pids+=($!)
  done
  wait "${pids[@]}"
  echo "filled $share with $n files in $((SECONDS - t0)) s" >&2
}
fill small 10
fill big "$FILES"

stat() { ctl --json stats | python3 -c "import json,sys; v=json.load(sys.stdin); print(v['rocksdb_writes'], v['proposals'])"; }
# Waits until the counters stop moving (destager, group commits).
settle() {
  local a b
  a=$(stat); sleep 1; b=$(stat)
  while [ "$a" != "$b" ]; do a=$b; sleep 1; b=$(stat); done
  echo "$b"
}
ms() { python3 -c "import time; print(int(time.monotonic()*1e6))"; }
median() { python3 -c "import sys,statistics; print(statistics.median([float(x) for x in sys.argv[1:]]))" "$@"; }
measure() { # share kind -> "median_ms writes proposals"
  local share=$1 kind=$2 times=() writes=() props=()
  for r in $(seq 1 "$ROUNDS"); do
    read -r w0 p0 < <(settle)
    local t0; t0=$(ms)
    if [ "$kind" = snapshot ]; then
      ctl snapshot create "$share" "s$r" >/dev/null
    else
      ctl share clone "$share@s1" "$share-c$r" >/dev/null
    fi
    local t1; t1=$(ms)
    read -r w1 p1 < <(settle)
    times+=("$(( (t1 - t0) / 1000 ))"); writes+=("$((w1 - w0))"); props+=("$((p1 - p0))")
  done
  echo "$(median "${times[@]}") $(median "${writes[@]}") $(median "${props[@]}")"
}
declare -A res
for share in small big; do
  for kind in snapshot clone; do
    res[$share.$kind]=$(measure "$share" "$kind")
  done
done
ratio() { python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f'{b/a:.2f}' if a else 'n/a')" "$1" "$2"; }
echo
echo "| operation | share of 10 files | share of $FILES files | ratio |"
echo "|---|---:|---:|---:|"
for kind in snapshot clone; do
  read -r st sw sp <<<"${res[small.$kind]}"
  read -r bt bw bp <<<"${res[big.$kind]}"
  echo "| $kind: duetctl round trip, ms (median of $ROUNDS) | $st | $bt | $(ratio "$st" "$bt") |"
  echo "| $kind: RocksDB writes | $sw | $bw | $(ratio "$sw" "$bw") |"
  echo "| $kind: raft proposals | $sp | $bp | $(ratio "$sp" "$bp") |"
done
# The big share's clone sees the source's files.
last=$((PARALLEL - 1))
sleep 2
n=$(smbclient "//127.0.0.1/big-c1" -p "$SMB_PORT" -U bench%benchpw -m SMB3 -c "cd d$last; ls" 2>/dev/null | grep -c ' f[0-9]' || true)
echo
echo "clone big-c1 lists $n files in d$last (the source's subdirectory holds $(( FILES - last * ((FILES + PARALLEL - 1) / PARALLEL) )))"
