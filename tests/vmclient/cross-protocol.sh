#!/bin/sh
# cross-protocol.sh NFS_DIR SMB_DIR USER: the same share mounted over NFS and
# SMB; what one protocol writes, the other reads back byte for byte. The NFS
# side acts as USER (su), the uid the SMB user has, as a NAS user would.
set -eu
N=$1; S=$2; U=$3
tag=$(cut -c1-8 /proc/sys/kernel/random/uuid)
fail() { echo "CROSS FAIL: $*"; exit 1; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
as() { su "$U" -c "$*"; }
sum() { md5sum < "$1" | cut -d' ' -f1; }
head -c 300000 /dev/urandom > /tmp/x1; head -c 5000000 /dev/urandom > /tmp/x2; head -c 1000 /dev/urandom > /tmp/x3
chmod 644 /tmp/x1 /tmp/x2 /tmp/x3

# NFS writes, SMB reads; SMB writes, NFS reads (fresh names: no cache).
as "mkdir $N/x-$tag"
as "cp /tmp/x1 $N/x-$tag/n1; cp /tmp/x3 $N/x-$tag/n3"; drop
[ "$(sum $S/x-$tag/n1)" = "$(sum /tmp/x1)" ] || fail "NFS -> SMB (300 kB)"
[ "$(sum $S/x-$tag/n3)" = "$(sum /tmp/x3)" ] || fail "NFS -> SMB (1 kB)"
echo "cross nfs-to-smb ok"
cp /tmp/x2 $S/x-$tag/s2; cp /tmp/x3 $S/x-$tag/s3; drop
[ "$(sum $N/x-$tag/s2)" = "$(sum /tmp/x2)" ] || fail "SMB -> NFS (5 MB)"
[ "$(sum $N/x-$tag/s3)" = "$(sum /tmp/x3)" ] || fail "SMB -> NFS (1 kB)"
echo "cross smb-to-nfs ok"

# One protocol changes a file the other has read: the other sees the change.
dd if=/tmp/x3 of=$S/x-$tag/n1 bs=1000 seek=10 conv=notrunc 2>/dev/null
dd if=/tmp/x3 of=/tmp/x1 bs=1000 seek=10 conv=notrunc 2>/dev/null; drop
[ "$(sum $N/x-$tag/n1)" = "$(sum /tmp/x1)" ] || fail "SMB overwrite seen over NFS"
as "dd if=/tmp/x3 of=$N/x-$tag/s2 bs=1000 seek=20 conv=notrunc 2>/dev/null"
dd if=/tmp/x3 of=/tmp/x2 bs=1000 seek=20 conv=notrunc 2>/dev/null; drop
[ "$(sum $S/x-$tag/s2)" = "$(sum /tmp/x2)" ] || fail "NFS overwrite seen over SMB"
echo "cross overwrite ok"

# Namespace changes: rename over SMB, seen over NFS; mkdir over NFS, seen over SMB.
mv $S/x-$tag/s3 $S/x-$tag/s3-renamed; drop
[ -e $N/x-$tag/s3-renamed ] && [ ! -e $N/x-$tag/s3 ] || fail "SMB rename seen over NFS"
as "mkdir $N/x-$tag/sub; echo hi > $N/x-$tag/sub/f"; drop
[ "$(cat $S/x-$tag/sub/f)" = hi ] || fail "NFS mkdir seen over SMB"
ls -l $N/x-$tag $S/x-$tag
rm -r $S/x-$tag; drop
[ ! -e $N/x-$tag ] || fail "SMB rm -r seen over NFS"
echo "CROSS OK"
