#!/usr/bin/env bash
# bench-smbclient.sh: Samba's own client against duet and Samba in one run:
# smbclient `mput` of SMB_FILES (1000) files of 4 KiB into a new directory,
# then `mget` of them, against duet with a share of durability `always`,
# duet with a share of durability `protocol` (docs/durability.md) and Samba
# (../shared/peers/start, 127.0.0.1:1445). smbclient sends CREATE, WRITE,
# CLOSE one round trip at a time. Prints a Markdown table: seconds (best of
# SMB_ROUNDS, 3), files/s, the ratio to Samba, and duet's fsyncs per file
# (`duetctl --json stats` before and after the mput). Then one file of
# SMB_BIG_MIB (256; the issue's figure is 1024) MiB: `put` once, then
# `get` twice (the first read after the destager settled, the second
# again: duet's read cache, `[cache] read_mib`, and Samba's page cache),
# MiB/s and the ratio to Samba. READ_MIB sets the duetd's `[cache]
# read_mib` (0: no read cache, for a before/after figure).
#
# scripts/bench.sh runs it with its duetd (SMB_PORT, ADMIN, DATA_DIR set;
# shares `bench` and `benchp`). Alone it starts a duetd of its own from
# DUETD / CTL (default target/debug: no build here) and the peers unless
# something already listens on 1445.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
PEERS=${PEERS:-$root/../shared/peers}
[ -x "$PEERS/start" ] || PEERS=/work/shared/peers
SMB_FILES=${SMB_FILES:-1000}
SMB_ROUNDS=${SMB_ROUNDS:-3}
SMB_BIG_MIB=${SMB_BIG_MIB:-256}
DUETD=${DUETD:-$root/target/debug/duetd}
CTL=${CTL:-$root/target/debug/duetctl}
work=$(mktemp -d /tmp/duet-smbclient.XXXXXX)
own=()
cleanup() {
  for p in "${own[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  [ "${stop_peers:-0}" = 1 ] && "$PEERS/stop" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
if [ -z "${SMB_PORT:-}" ]; then
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
[cache]
read_mib = ${READ_MIB:-256}
CONF
  "$DUETD" --config "$work/duetd.toml" >"$work/duetd.out" 2>"$work/duetd.log" &
  own+=($!)
  for _ in $(seq 1 300); do ss -ltn | grep -q ":$SMB_PORT " && ss -ltn | grep -q ":${ADMIN##*:} " && break; sleep 0.1; done
  ctl() { "$CTL" --addr "$ADMIN" --data-dir "$DATA_DIR" "$@"; }
  ctl user add bench --password benchpw >/dev/null
  ctl share add bench --path /bench --no-root-squash >/dev/null
  ctl share add benchp --path /benchp --no-root-squash --durability protocol >/dev/null
  sleep 2
fi
ctl() { "$CTL" --addr "$ADMIN" --data-dir "$DATA_DIR" "$@"; }
if ! ss -ltn | grep -q ':1445 '; then "$PEERS/start" >/dev/null; stop_peers=1; fi

src=$work/src; mkdir -p "$src"
python3 - "$src" "$SMB_FILES" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(os.path.join(d, f"f{i:05}.bin"), "wb") as f:
        f.write(os.urandom(4096))
PY
fsyncs() { ctl --json stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["fsyncs"])'; }
now() { date +%s.%N; }
# run NAME URL: mput and mget SMB_ROUNDS times, prints "NAME mput_s mget_s fsyncs_per_file"
run() {
  local name=$1 share=$2 port=$3 duet=$4 best_put=999999 best_get=999999 fs_total=0
  for r in $(seq 1 "$SMB_ROUNDS"); do
    local dir="sc-$$-$r" back=$work/back-$name-$r
    mkdir -p "$back"
    local f0=0; [ "$duet" = 1 ] && f0=$(fsyncs)
    local t0; t0=$(now)
    smbclient "$share" -p "$port" -U bench%benchpw -m SMB3 -c "mkdir $dir; cd $dir; prompt; lcd $src; mput *" >"$work/out" 2>&1 \
      || { cat "$work/out" >&2; echo "bench-smbclient: mput to $name failed" >&2; exit 1; }
    local t1; t1=$(now)
    [ "$duet" = 1 ] && fs_total=$((fs_total + $(fsyncs) - f0))
    smbclient "$share" -p "$port" -U bench%benchpw -m SMB3 -c "cd $dir; prompt; lcd $back; mget *" >"$work/out" 2>&1 \
      || { cat "$work/out" >&2; echo "bench-smbclient: mget from $name failed" >&2; exit 1; }
    local t2; t2=$(now)
    diff -rq "$src" "$back" >/dev/null || { echo "bench-smbclient: $name: files came back different" >&2; exit 1; }
    smbclient "$share" -p "$port" -U bench%benchpw -m SMB3 -c "deltree $dir" >/dev/null 2>&1 || true
    rm -rf "$back"
    best_put=$(python3 -c "print(min($best_put, $t1 - $t0))")
    best_get=$(python3 -c "print(min($best_get, $t2 - $t1))")
  done
  local per="-"; [ "$duet" = 1 ] && per=$(python3 -c "print(f'{$fs_total / ($SMB_ROUNDS * $SMB_FILES):.2f}')")
  echo "$name $best_put $best_get $per"
}
res=$work/res
run duet-always "//127.0.0.1/bench" "$SMB_PORT" 1 >"$res"
run duet-protocol "//127.0.0.1/benchp" "$SMB_PORT" 1 >>"$res"
run samba "//127.0.0.1/share" 1445 0 >>"$res"
# big NAME URL PORT: put one SMB_BIG_MIB file, get it twice; "NAME put_s get1_s get2_s"
head -c $((SMB_BIG_MIB << 20)) /dev/urandom >"$work/big.bin"
big() {
  local name=$1 share=$2 port=$3 t0 t1 t2 t3
  t0=$(now)
  smbclient "$share" -p "$port" -U bench%benchpw -m SMB3 -c "lcd $work; put big.bin big-$$.bin" >"$work/out" 2>&1 \
    || { cat "$work/out" >&2; echo "bench-smbclient: put to $name failed" >&2; exit 1; }
  t1=$(now)
  sleep 3 # the destager moves the log into chunk files
  t1b=$(now)
  smbclient "$share" -p "$port" -U bench%benchpw -m SMB3 -c "lcd $work; get big-$$.bin back1.bin" >"$work/out" 2>&1 \
    || { cat "$work/out" >&2; echo "bench-smbclient: get from $name failed" >&2; exit 1; }
  t2=$(now)
  smbclient "$share" -p "$port" -U bench%benchpw -m SMB3 -c "lcd $work; get big-$$.bin back2.bin; del big-$$.bin" >"$work/out" 2>&1 \
    || { cat "$work/out" >&2; echo "bench-smbclient: second get from $name failed" >&2; exit 1; }
  t3=$(now)
  cmp -s "$work/big.bin" "$work/back1.bin" && cmp -s "$work/big.bin" "$work/back2.bin" \
    || { echo "bench-smbclient: $name: the big file came back different" >&2; exit 1; }
  rm -f "$work/back1.bin" "$work/back2.bin"
  echo "$name $(python3 -c "print($t1 - $t0, $t2 - $t1b, $t3 - $t2)")"
}
bigres=$work/bigres
big duet-always "//127.0.0.1/bench" "$SMB_PORT" >"$bigres"
big duet-protocol "//127.0.0.1/benchp" "$SMB_PORT" >>"$bigres"
big samba "//127.0.0.1/share" 1445 >>"$bigres"
fs_ms=$(dd if=/dev/zero of="$work/fsync-probe" bs=4k count=200 oflag=dsync 2>&1 | awk '/copied/ {for (i=1;i<=NF;i++) if ($i ~ /^s,?$/) s=$(i-1); printf "%.2f", s*1000/200}')
case "$DUETD" in *release*) build=release ;; *) build=debug ;; esac
python3 - "$res" "$SMB_FILES" "$SMB_ROUNDS" "$build" "$fs_ms" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
n, rounds, build, fs_ms = int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
samba = next(r for r in rows if r[0] == "samba")
print(f"smbclient (Samba's client, one request at a time), {n} files of 4 KiB, best of {rounds}; duetd {build} build; one 4 KiB O_DSYNC write here: {fs_ms} ms.")
print()
print("| target | mput s | mput files/s | mput vs Samba | mget s | mget files/s | mget vs Samba | duet fsyncs per file (mput) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for name, put, get, per in rows:
    put, get = float(put), float(get)
    print(f"| {name} | {put:.3f} | {n/put:.0f} | {float(samba[1])/put:.2f}x | {get:.3f} | {n/get:.0f} | {float(samba[2])/get:.2f}x | {per} |")
PY
python3 - "$bigres" "$SMB_BIG_MIB" <<'PY'
import sys
rows = {l.split()[0]: [float(x) for x in l.split()[1:]] for l in open(sys.argv[1])}
mib = int(sys.argv[2])
samba = rows["samba"]
print()
print(f"smbclient put, then get twice, of one {mib} MiB file (MiB/s; the first get after the destager settled):")
print()
print("| target | put MiB/s | vs Samba | first get MiB/s | vs Samba | second get MiB/s | vs Samba |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name, (p, g1, g2) in rows.items():
    print(f"| {name} | {mib/p:.0f} | {samba[0]/p:.2f}x | {mib/g1:.0f} | {samba[1]/g1:.2f}x | {mib/g2:.0f} | {samba[2]/g2:.2f}x |")
PY
