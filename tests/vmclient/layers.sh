#!/bin/sh
# layers.sh NFSDIR SMBDIR: snapshots and writable clones through the
# kernel's NFSv4.2 and cifs clients (issue 15). NFSDIR and SMBDIR mount the
# share `public`; the host takes snapshot `vm1` of it and makes the clone
# `vmc` of that snapshot when asked on CTRL_PORT. Byte-exact (cmp)
# throughout: files changed after the snapshot read old there and new in
# the share; the clone sees the snapshot's files; writes, a delete, a
# rename, a hard link and a directory removed and made again in the clone
# never reach the source, and the source's later changes never reach the
# clone.
set -eu
n=$1; s=$2
fail() { echo "LAYERS FAIL: $*"; exit 1; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
H=10.0.2.2
head -c 300000 /dev/urandom > /tmp/la
head -c 5000 /dev/urandom > /tmp/lb
head -c 200000 /dev/urandom > /tmp/lc
mkdir $n/lay
cp /tmp/la $n/lay/a; cp /tmp/lb $n/lay/b; mkdir $n/lay/dir; sync
reply=$(echo layers | nc $H "$CTRL_PORT")
[ "$reply" = "layers done" ] || fail "the host made no snapshot and clone ($reply)"
# Changes after the snapshot.
cat /tmp/lc >> $n/lay/a; rm $n/lay/b; cp /tmp/lc $n/lay/c; sync
cat /tmp/la /tmp/lc > /tmp/la2
drop
cmp /tmp/la2 $n/lay/a || fail "a in the share"
cmp /tmp/la2 $s/lay/a || fail "a in the share over cifs"
cmp /tmp/la $n/.snapshot/vm1/lay/a || fail "a in the snapshot"
cmp /tmp/lb $n/.snapshot/vm1/lay/b || fail "b, deleted since, in the snapshot"
[ ! -e $n/.snapshot/vm1/lay/c ] || fail "c, new since, in the snapshot"
if cp /tmp/lc $n/.snapshot/vm1/lay/x 2>/dev/null; then fail "a write into the snapshot"; fi
echo "step snapshot ok"
# The clone of the snapshot, over both clients.
mkdir -p /mnt/cn /mnt/cs
# NFSv4 mounts a share by its name under the pseudo-root (NFSv3 MOUNT also takes its path, /clones/vmc).
mount -t nfs4 $H:/vmc /mnt/cn -o addr=$H,vers=4.2,port=$NFS_PORT || fail "mount the clone over NFS"
mount -t cifs //$H/vmc /mnt/cs -o ip=$H,port=$SMB_PORT,username=$SMB_USER,password=$SMB_PASS,vers=3.1.1,uid=$SMB_UID,gid=$SMB_UID || fail "mount the clone over cifs"
cmp /tmp/la /mnt/cn/lay/a || fail "a in the clone"
cmp /tmp/lb /mnt/cn/lay/b || fail "b in the clone"
cmp /tmp/la /mnt/cs/lay/a || fail "a in the clone over cifs"
[ ! -e /mnt/cn/lay/c ] || fail "c, new in the source after the snapshot, in the clone"
echo "step clone sees ok"
# Changes in the clone.
cat /tmp/lb >> /mnt/cn/lay/a
rm /mnt/cn/lay/b
cp /tmp/lc /mnt/cn/lay/new; mv /mnt/cn/lay/new /mnt/cn/lay/renamed
ln /mnt/cn/lay/renamed /mnt/cn/lay/hard
rmdir /mnt/cn/lay/dir; mkdir /mnt/cn/lay/dir; echo inside > /mnt/cn/lay/dir/f
# The source's changes after the clone.
cp /tmp/lb $n/lay/late; sync
cat /tmp/la /tmp/lb > /tmp/la3
drop
cmp /tmp/la3 /mnt/cn/lay/a || fail "a changed in the clone"
cmp /tmp/la3 /mnt/cs/lay/a || fail "a changed in the clone, over cifs"
[ ! -e /mnt/cn/lay/b ] || fail "b removed in the clone"
cmp /tmp/lc /mnt/cn/lay/renamed && cmp /tmp/lc /mnt/cn/lay/hard || fail "renamed and hard in the clone"
[ "$(stat -c %h /mnt/cn/lay/hard)" = 2 ] || fail "the hard link count in the clone"
[ "$(cat /mnt/cn/lay/dir/f)" = inside ] || fail "the directory made again in the clone"
[ ! -e /mnt/cn/lay/late ] || fail "the source's later file in the clone"
cmp /tmp/la2 $n/lay/a || fail "the source's a after the clone's changes"
[ ! -e $n/lay/b ] && [ ! -e $n/lay/renamed ] && [ ! -e $n/lay/hard ] && [ ! -e $n/lay/dir/f ] || fail "the clone's changes in the source"
cmp /tmp/lc $n/lay/c && cmp /tmp/lb $n/lay/late || fail "the source's own files"
cmp /tmp/la $n/.snapshot/vm1/lay/a || fail "the snapshot after it all"
echo "step clone changes ok"
umount /mnt/cn; umount /mnt/cs
rm -r $n/lay
echo "LAYERS OK"
