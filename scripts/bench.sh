#!/usr/bin/env bash
# bench.sh: one command for the side-by-side table in docs/benchmarks.md.
#
# Builds duet, installs and starts the peers (Samba on 127.0.0.1:1445,
# NFS-Ganesha NFSv4.1 on 127.0.0.1:12049, via ../shared/peers/start),
# starts a fresh duetd on free loopback ports, runs `duetctl bench` against
# all four servers (duet SMB, Samba, duet NFSv4.1, Ganesha) with the same
# client, again for small files, sequential and random I/O on a duet
# `protocol` share,
# the amplification report against duet, the vectorised-copy
# comparison at 0 and 5 ms added latency, Samba's smbclient (mput/mget of
# 1,000 x 4 KiB) against duet `always`, duet `protocol` and Samba
# (scripts/bench-smbclient.sh), the Linux kernel's NFSv4.1 and cifs clients
# in a qemu guest against duet, Ganesha and Samba (scripts/bench-vmclient.sh),
# and writes docs/benchmarks.md,
# docs/bench/results.json and docs/bench/results.svg.
#
# Environment (defaults in brackets):
#   DUETD        duetd binary [target/release/duetd if built, else target/debug/duetd]
#   RELEASE=1    build the release workspace first (about 25 min on 2 cores)
#   CLIENTS      client counts [1,16]      FILES     files per client [200]
#   LS_ENTRIES   [10000]                   SEQ_SIZE  [1G]
#   RAND_SIZE    per client [16M]          RAND_OPS  per client [500]
#   VCOPY_FILES  [1000]                    LATENCY   ms for the vcopy run [5]
#   PEERS        path to the peers scripts [../shared/peers]
#   KEEP=1       keep duetd's data directory and log (else removed)
#   SMB_FILES    files for the smbclient run [1000]  SMB_ROUNDS [3]
#   VMCLIENT=0   skip the kernel clients in a qemu guest (scripts/bench-vmclient.sh;
#                VM_FILES [300], VM_MB [64])
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
PEERS=${PEERS:-$root/../shared/peers}
[ -x "$PEERS/start" ] || PEERS=/work/shared/peers
CLIENTS=${CLIENTS:-1,16}
FILES=${FILES:-200}
LS_ENTRIES=${LS_ENTRIES:-10000}
SEQ_SIZE=${SEQ_SIZE:-1G}
RAND_SIZE=${RAND_SIZE:-16M}
RAND_OPS=${RAND_OPS:-500}
VCOPY_FILES=${VCOPY_FILES:-1000}
LATENCY=${LATENCY:-5}
t0=$(date +%s)

# Release when asked or when a release build exists (then it is brought
# up to date, which is quick); otherwise the debug build, labelled so.
if [ "${RELEASE:-0}" = 1 ] || [ -x "$root/target/release/duetd" ]; then
  cargo build --release --workspace
  DUETD=${DUETD:-$root/target/release/duetd}
  CTL=${CTL:-$root/target/release/duetctl}
else
  cargo build --workspace --all-targets
  DUETD=${DUETD:-$root/target/debug/duetd}
  CTL=${CTL:-$root/target/debug/duetctl}
fi
case "$DUETD" in *release*) build=release ;; *) build=debug ;; esac
case "$CTL" in *release*) ctlbuild=release ;; *) ctlbuild=debug ;; esac

"$PEERS/start"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
work=$(mktemp -d /tmp/duet-bench.XXXXXX)
admin=$(free_port); smb=$(free_port); nfs=$(free_port)
cat > "$work/duetd.toml" <<CONF
data_dir = "$work/data"
[admin]
listen = "127.0.0.1:$admin"
[smb]
listen = "127.0.0.1:$smb"
[nfs]
listen = "127.0.0.1:$nfs"
portmap = false
CONF
ulimit -l unlimited 2>/dev/null || ulimit -l 65536 2>/dev/null || true
"$DUETD" --config "$work/duetd.toml" >"$work/duetd.out" 2>"$work/duetd.log" &
duetd_pid=$!
cleanup() {
  kill "$duetd_pid" 2>/dev/null || true; wait "$duetd_pid" 2>/dev/null || true
  "$PEERS/stop" >/dev/null 2>&1 || true
  [ "${KEEP:-0}" = 1 ] && echo "bench.sh: duetd's data and log kept in $work" || rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 1 200); do
  ss -ltn | grep -q ":$nfs " && ss -ltn | grep -q ":$smb " && ss -ltn | grep -q ":$admin " && break
  sleep 0.1
done
ctl() { "$CTL" --addr "127.0.0.1:$admin" --data-dir "$work/data" "$@"; }
ctl user add bench --password benchpw >/dev/null
ctl share add bench --path /bench --no-root-squash >/dev/null
ctl share add benchp --path /benchp --no-root-squash --durability protocol >/dev/null
sleep 2 # the protocol executors pick up new users and shares shortly after

mkdir -p docs/bench
targets=(
  "duet-smb=smb://bench:benchpw@127.0.0.1:$smb/bench"
  "samba=smb://bench:benchpw@127.0.0.1:1445/share"
  "duet-nfs=nfs4://127.0.0.1:$nfs/bench"
  "ganesha=nfs4://127.0.0.1:12049/export"
)
cmd=(bench "${targets[@]}" --workloads smallfile,mdtest,ls,seq,rand --clients "$CLIENTS" --files "$FILES"
     --ls-entries "$LS_ENTRIES" --seq-size "$SEQ_SIZE" --rand-size "$RAND_SIZE" --rand-ops "$RAND_OPS"
     --report-amplification --json-out docs/bench/results.json --svg docs/bench/results.svg --markdown "$work/main.md")
ctl "${cmd[@]}" | tee "$work/main.txt" || status=$?
# The same small-file, sequential and random workloads against a `protocol` share
# (docs/durability.md: SMB changes without WRITE_THROUGH synced by a group
# commit within a few ms; NFS FILE_SYNC writes, which this client sends,
# still synced), the peers again beside it.
pcmd=(bench "duet-smb-protocol=smb://bench:benchpw@127.0.0.1:$smb/benchp"
      "samba=smb://bench:benchpw@127.0.0.1:1445/share"
      "duet-nfs-protocol=nfs4://127.0.0.1:$nfs/benchp"
      "ganesha=nfs4://127.0.0.1:12049/export"
      --workloads smallfile,seq,rand --clients "$CLIENTS" --files "$FILES" --seq-size "$SEQ_SIZE" --rand-size "$RAND_SIZE" --rand-ops "$RAND_OPS"
      --json-out docs/bench/results-protocol.json --markdown "$work/protocol.md")
ctl "${pcmd[@]}" | tee "$work/protocol.txt" || status=$?
vc=(bench "duet-nfs=nfs4://127.0.0.1:$nfs/bench" --workloads vcopy --files "$VCOPY_FILES")
ctl "${vc[@]}" --markdown "$work/vcopy0.md" --json-out docs/bench/vcopy-0ms.json | tee "$work/vcopy0.txt" || status=$?
ctl "${vc[@]}" --latency "$LATENCY" --markdown "$work/vcopy.md" --json-out "docs/bench/vcopy-${LATENCY}ms.json" | tee "$work/vcopy.txt" || status=$?
SMB_PORT=$smb ADMIN=127.0.0.1:$admin DATA_DIR=$work/data DUETD=$DUETD CTL=$CTL PEERS=$PEERS \
  scripts/bench-smbclient.sh | tee "$work/smbclient.md" || status=$?
# The kernel's own clients in a qemu guest (relative figures: software emulation).
if [ "${VMCLIENT:-1}" = 1 ]; then
  DUETD=$DUETD CTL=$CTL scripts/bench-vmclient.sh | tee "$work/vmclient.md" || status=$?
else
  echo "(not run: VMCLIENT=0)" >"$work/vmclient.md"
fi
t1=$(date +%s)
# The disk's synchronous-write latency (what one durable commit costs here).
fs_ms=$(dd if=/dev/zero of="$work/fsync-probe" bs=4k count=200 oflag=dsync 2>&1 | awk '/copied/ {for (i=1;i<=NF;i++) if ($i ~ /^s,?$/) s=$(i-1); printf "%.2f", s*1000/200}')
rm -f "$work/fsync-probe"
# One loopback TCP round trip: the fastest of 2,000 one-byte ping-pongs
# between two processes (Python at both ends; the median is mostly the
# scheduler waking the other side on 2 CPUs).
rtt_ms=$(python3 - <<'PY'
import os, socket, time
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
if os.fork() == 0:
    c, _ = srv.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while (b := c.recv(1)):
        c.sendall(b)
    os._exit(0)
s = socket.create_connection(srv.getsockname()); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
t = []
for _ in range(2000):
    t0 = time.perf_counter(); s.sendall(b"x"); s.recv(1); t.append(time.perf_counter() - t0)
s.close(); os.wait()
print(f"{min(t) * 1000:.3f}")
PY
)

{
  echo "# Benchmarks"
  echo
  echo "Produced by \`scripts/bench.sh\` on $(date -u +%Y-%m-%d) in $((t1 - t0)) s (peers installed and started by the script)."
  echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), shared with other builds while it ran; kernel $(uname -r)."
  echo "duetd: **$build build** ($DUETD); client: duetctl, **$ctlbuild build** ($CTL), async: one connection and one task per client, the tasks spread over one glommio executor per core ($(nproc) threads)."
  echo "Disk: one 4 KiB O_DSYNC write (\`dd oflag=dsync\`, next to the peers' and duet's data) takes ${fs_ms} ms."
  echo "Network: one loopback TCP round trip takes ${rtt_ms} ms (the fastest of 2,000 between two processes). The goals' *floor* column adds them up: what one request of that kind cannot go below here."
  echo "Peers: $(smbd --version 2>/dev/null | head -1), NFS-Ganesha $(dpkg-query -W -f='${Version}' nfs-ganesha 2>/dev/null || echo '?')."
  echo
  echo "Command (what the script ran; the ports are free ones chosen at start):"
  echo
  echo '```'
  echo "duetctl ${cmd[*]}"
  echo "duetctl ${pcmd[*]}"
  echo "duetctl ${vc[*]}"
  echo "duetctl ${vc[*]} --latency $LATENCY"
  echo '```'
  echo
  echo "Every file written is read back and compared (column *verified*). Before each target the bench writes back the machine's dirty pages (\`sync\`): the peers answer writes from the page cache, and their writeback would otherwise land in the next target's run."
  echo "SMB chains go as one related compound (CREATE+WRITE+CLOSE, CREATE+QUERY_INFO+CLOSE, CREATE+READ+CLOSE, CREATE(delete-on-close)+CLOSE), NFSv4.1 chains as one COMPOUND; both sides get the same requests."
  echo "Ratios compare ops/s (MB/s for seq-*) of the duet target with the peer of the same protocol."
  echo
  echo "## Goals"
  echo
  python3 scripts/bench_goals.py docs/bench/results.json "docs/bench/vcopy-${LATENCY}ms.json" \
    --protocol docs/bench/results-protocol.json --fsync-ms "$fs_ms" --rtt-ms "$rtt_ms"
  echo
  echo "## Side by side"
  echo
  cat "$work/main.md"
  echo
  echo "![chart](bench/results.svg)"
  echo
  echo "## Durability \`protocol\` (small files, sequential and random I/O)"
  echo
  cat "$work/protocol.md"
  echo
  echo "## smbclient: mput and mget of many small files, per durability (docs/durability.md)"
  echo
  cat "$work/smbclient.md"
  echo
  echo "## The Linux kernel's NFSv4.1 and cifs clients (scripts/bench-vmclient.sh)"
  echo
  cat "$work/vmclient.md"
  echo
  echo "## Vectorised NFSv4 client against one file at a time (server-side COPY of $VCOPY_FILES files)"
  echo
  echo "One at a time = OPEN+READ+CLOSE then OPEN+WRITE+CLOSE per file (two COMPOUNDs, the fewest a non-vectorised client sends)."
  echo "Latency mode: a network namespace and veth pair; \`tc netem\` where the kernel has it, else (this machine: no sch_netem) the bench's forwarder thread on the veth address delays every client-to-server chunk by the given ms (so the round trip grows by it)."
  echo
  sed -n '/vcopy target/,$p' "$work/vcopy0.md" | sed '/client chain/,$d'
  sed -n '/vcopy target/,$p' "$work/vcopy.md" | sed '/client chain/,$d' | tail -n +3
  echo
  if [ -f docs/benchmarks-notes.md ]; then cat docs/benchmarks-notes.md; fi
} > docs/benchmarks.md
echo "bench.sh: wrote docs/benchmarks.md in $((t1 - t0)) s"
exit "${status:-0}"
