#!/usr/bin/env bash
# End-to-end check of target/images/duet-oci.tar under podman (root), until
# appliance/tests/oci.rs exists: load, run with a bind volume and
# 127.0.0.1 ports, wait for health, admin password root-only in the volume
# and not in the log, SMB write -> NFS read, NFS write, SIGTERM stop drains
# (exit 0), start again on the same volume, read both back.
# The extra podman options are this build machine's (images/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
ctl="${DUET_BIN_DIR:-target/debug}/duetctl"
img="${DUET_OCI_IMAGE:-target/images/duet-oci.tar}"
name=duet-oci-test-$$
w=$(mktemp -d); v="$w/vol"; mkdir "$v"
trap 'podman rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$w"' EXIT
podman load -i "$img" | grep 'Loaded image'
ps=24445 pn=22049 pa=27445
start() {
  podman run -d --name "$name" --runtime runc --security-opt seccomp=unconfined \
    --ulimit nofile=20000:20000 --ulimit nproc=4096:4096 \
    --health-cmd /usr/local/lib/duet/healthcheck --health-interval disable \
    -v "$v":/var/lib/duet -p 127.0.0.1:$ps:445 -p 127.0.0.1:$pn:2049 -p 127.0.0.1:$pa:7445 \
    localhost/duet:latest >/dev/null
  for i in $(seq 120); do
    podman healthcheck run "$name" >/dev/null 2>&1 && { echo "healthy after $i polls"; return; }
    sleep 0.5
  done
  podman logs "$name"; echo "test-oci: not healthy"; exit 1
}
fail() { echo "test-oci: FAIL: $*"; exit 1; }
t0=$(date +%s)
start
[ "$(stat -c '%a %u' "$v/admin-password")" = "600 0" ] || fail "admin-password is not root's 0600"
log=$(podman logs "$name" 2>&1)
if grep -qF "$(cat "$v/admin-password")" <<<"$log"; then fail "the password is in the log"; fi
cp "$v/admin-password" "$w/pw"; echo oci-pass-1 >"$w/upw"
C=("$ctl" --addr 127.0.0.1:$pa --user admin --admin-password-file "$w/pw")
"${C[@]}" user add ocitest --password-file "$w/upw" >/dev/null
sleep 3
cd "$w"
head -c 1500000 /dev/urandom >a.bin; head -c 700000 /dev/urandom >b.bin
U="?version=3&nfsport=$pn&mountport=$pn"
smb() { smbclient //127.0.0.1/public -p $ps -U ocitest%oci-pass-1 -m SMB3 -c "$1" >smb.log 2>&1 || { cat smb.log; fail "smbclient $1"; }; }
smb 'put a.bin'
nfs-cp b.bin "nfs://127.0.0.1/public/b.bin$U" >/dev/null
nfs-cp "nfs://127.0.0.1/public/a.bin$U" a.nfs >/dev/null; cmp a.bin a.nfs || fail "NFS read other bytes than SMB wrote"
ts=$(date +%s%N); podman stop -t 30 "$name" >/dev/null
echo "stop: $(( ($(date +%s%N) - ts) / 1000000 )) ms"
[ "$(podman inspect "$name" --format '{{.State.ExitCode}}')" = 0 ] || fail "duetd did not exit 0 on SIGTERM"
log=$(podman logs "$name" 2>&1)
grep -q 'stopping: draining' <<<"$log" || fail "no drain line"
grep -q 'INFO.*stopped' <<<"$log" || fail "no stopped line"
podman rm "$name" >/dev/null
start
nfs-cp "nfs://127.0.0.1/public/b.bin$U" b.nfs >/dev/null; cmp b.bin b.nfs || fail "b.bin after restart"
smb 'get a.bin a.smb'; cmp a.bin a.smb || fail "a.bin after restart"
"${C[@]}" status >/dev/null || fail "the admin password no longer works"
podman stop -t 30 "$name" >/dev/null
echo "test-oci: ok in $(( $(date +%s) - t0 )) s"
