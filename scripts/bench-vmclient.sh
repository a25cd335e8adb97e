#!/usr/bin/env bash
# bench-vmclient.sh: the Linux kernel's own NFS and cifs clients against
# duet and the peers in one run (issue 16: measure with clients duet did
# not write). ../shared/vmclient/linux-client boots Debian's kernel under
# qemu (software emulation here: relative figures, not absolute speed)
# and runs ../shared/vmclient/workload-smallfiles.sh (VM_FILES 4 KiB files
# created, `ls -l`, read, removed; a VM_MB MiB file written and read back
# after dropping the guest's caches) on each of:
#   duet NFSv4.1 (share `public`, durability always)
#   duet NFSv4.1 (share `fast`, durability protocol)
#   NFS-Ganesha NFSv4.1 (../shared/peers, 127.0.0.1:12049 /export)
#   duet cifs 3.1.1 (`public`), duet cifs 3.1.1 (`fast`)
#   Samba cifs 3.1.1 (127.0.0.1:1445 share)
# and prints a Markdown table: each phase's seconds and the ratio to the
# peer of the same protocol (>1: duet faster). Starts a duetd of its own
# from DUETD / CTL (default target/debug: no build here).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
SHARED=${SHARED:-$root/../shared}
[ -d "$SHARED/vmclient" ] || SHARED=/work/shared
VM_FILES=${VM_FILES:-300}
VM_MB=${VM_MB:-64}
DUETD=${DUETD:-$root/target/debug/duetd}
CTL=${CTL:-$root/target/debug/duetctl}
work=$(mktemp -d /tmp/duet-vmbench.XXXXXX)
pid=
cleanup() {
  [ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
  [ "${stop_peers:-0}" = 1 ] && "$SHARED/peers/stop" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ADMIN=127.0.0.1:$(free_port); SMB_PORT=$(free_port); NFS_PORT=$(free_port); DATA_DIR=$work/data
cat > "$work/duetd.toml" <<CONF
data_dir = "$DATA_DIR"
[admin]
listen = "$ADMIN"
[smb]
listen = "127.0.0.1:$SMB_PORT"
[nfs]
listen = "127.0.0.1:$NFS_PORT"
portmap = false
CONF
"$DUETD" --config "$work/duetd.toml" >"$work/duetd.out" 2>"$work/duetd.log" &
pid=$!
for _ in $(seq 1 300); do ss -ltn | grep -q ":$SMB_PORT " && ss -ltn | grep -q ":${ADMIN##*:} " && break; sleep 0.1; done
ctl() { "$CTL" --addr "$ADMIN" --data-dir "$DATA_DIR" "$@"; }
ctl user add bench --password benchpw >/dev/null
ctl share add fast --path /fast --no-root-squash --durability protocol >/dev/null
ctl share modify public --no-root-squash >/dev/null 2>&1 || true
SMB_UID=$(ctl --json user list | python3 -c 'import json,sys; print(next(u["uid"] for u in json.load(sys.stdin) if u["name"]=="bench"))' 2>/dev/null || echo 1000)
if ! ss -ltn | grep -q ':1445 '; then "$SHARED/peers/start" >/dev/null; stop_peers=1; fi
sleep 2

guest=$work/guest.sh
{
  echo "#!/bin/sh"
  echo "H=10.0.2.2 NFS_PORT=$NFS_PORT SMB_PORT=$SMB_PORT SMB_UID=$SMB_UID N=$VM_FILES MB=$VM_MB"
  echo "export N MB"
  echo "cat > /tmp/workload.sh <<'WL'"
  cat "$SHARED/vmclient/workload-smallfiles.sh"
  echo "WL"
  cat <<'G'
echo "bench:x:$SMB_UID:$SMB_UID::/tmp:/bin/sh" >> /etc/passwd
echo "bench:x:$SMB_UID:" >> /etc/group
one() { # NAME MOUNT-COMMAND...
  name=$1; shift
  mkdir -p /mnt/t
  if "$@"; then
    sh /tmp/workload.sh | sed "s/^/ROW $name /"
    umount /mnt/t || echo "ROW $name umount-failed 0 0"
  else
    echo "ROW $name mount-failed 0 0"
  fi
}
one duet-nfs41-always mount -t nfs4 $H:/public /mnt/t -o addr=$H,vers=4.1,port=$NFS_PORT
one duet-nfs41-protocol mount -t nfs4 $H:/fast /mnt/t -o addr=$H,vers=4.1,port=$NFS_PORT
one ganesha-nfs41 mount -t nfs4 $H:/export /mnt/t -o addr=$H,vers=4.1,port=12049
one duet-cifs-always mount -t cifs //$H/public /mnt/t -o ip=$H,port=$SMB_PORT,username=bench,password=benchpw,vers=3.1.1,uid=$SMB_UID,gid=$SMB_UID
one duet-cifs-protocol mount -t cifs //$H/fast /mnt/t -o ip=$H,port=$SMB_PORT,username=bench,password=benchpw,vers=3.1.1,uid=$SMB_UID,gid=$SMB_UID
one samba-cifs mount -t cifs //$H/share /mnt/t -o ip=$H,port=1445,username=bench,password=benchpw,vers=3.1.1,uid=0,gid=0
# The floor: the same workload on a tmpfs inside the guest (no server, no
# network): what the client itself costs under TCG.
one guest-tmpfs mount -t tmpfs tmpfs /mnt/t
G
} >"$guest"
chmod +x "$guest"
"$SHARED/vmclient/linux-client" "$guest" --timeout "${VM_TIMEOUT:-1500}" >"$work/vm.out" 2>&1 || { cat "$work/vm.out" >&2; echo "bench-vmclient: the guest failed" >&2; exit 1; }
grep '^ROW ' "$work/vm.out" >"$work/rows" || { cat "$work/vm.out" >&2; echo "bench-vmclient: no figures" >&2; exit 1; }
case "$DUETD" in *release*) build=release ;; *) build=debug ;; esac
python3 - "$work/rows" "$VM_FILES" "$VM_MB" "$build" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    _, name, phase, count, cs = line.split()
    rows.setdefault(name, {})[phase] = int(cs) / 100.0
files, mb, build = sys.argv[2], sys.argv[3], sys.argv[4]
phases = ["create4k", "ls-l", "read4k", "remove", "seqwrite-MB", "seqread-MB"]
peer = {"nfs41": "ganesha-nfs41", "cifs": "samba-cifs"}
print(f"Linux kernel clients under qemu (TCG), workload-smallfiles.sh: {files} files of 4 KiB, a {mb} MiB file; duetd {build} build. Seconds (ratio to the peer of the same protocol, >1 = duet faster).")
print()
print("| target | " + " | ".join(phases) + " |")
print("|---|" + "---:|" * len(phases))
for name, ph in rows.items():
    if any(p not in ph for p in phases):
        print(f"| {name} | " + " | ".join("failed" for _ in phases) + " |")
        continue
    base = rows.get(peer[name.split("-")[1]], {}) if name.startswith("duet") else {}
    cells = []
    for p in phases:
        s = ph[p]
        r = f" ({base[p] / s:.2f}x)" if p in base and s > 0 else ""
        cells.append(f"{s:.2f}{r}")
    print(f"| {name} | " + " | ".join(cells) + " |")
floor = rows.get("guest-tmpfs", {})
if all(p in floor for p in phases):
    print()
    print("guest-tmpfs is the floor: the workload on a tmpfs inside the guest, no server. The best ratio any server could reach against each peer (peer seconds / floor seconds):")
    print()
    for proto, pname in sorted(peer.items()):
        base = rows.get(pname, {})
        cells = [f"{p} {base[p] / floor[p]:.2f}x" if p in base and floor[p] > 0 else f"{p} -" for p in phases]
        print(f"- {pname}: " + ", ".join(cells))
PY
