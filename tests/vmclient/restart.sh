#!/bin/sh
# restart.sh NFS3_DIR NFS4_DIR: duetd restarts under mounted clients (as in
# an upgrade). Files written before are read back after, over NFSv3 and
# NFSv4.x, through a file descriptor opened before the restart too, and new
# files can be written. The host restarts duetd when asked on CTRL_PORT.
set -eu
A=$1; B=$2
tag=$(cut -c1-8 /proc/sys/kernel/random/uuid)
fail() { echo "RESTART FAIL: $*"; exit 1; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
head -c 300000 /dev/urandom > /tmp/r
cp /tmp/r $A/r3-$tag; cp /tmp/r $B/r4-$tag; sync
exec 3< $B/r4-$tag
reply=$(echo restart | nc 10.0.2.2 "$CTRL_PORT")
[ "$reply" = restarted ] || fail "the host did not restart duetd ($reply)"
echo "restart duetd restarted"
drop
cmp /tmp/r $A/r3-$tag || fail "NFSv3 read after the restart"
cmp /tmp/r $B/r4-$tag || fail "NFSv4 read after the restart"
[ "$(head -c 1000 <&3 | md5sum)" = "$(head -c 1000 /tmp/r | md5sum)" ] || fail "read through a descriptor opened before the restart"
exec 3<&-
cp /tmp/r $B/n4-$tag && cp /tmp/r $A/n3-$tag || fail "writes after the restart"
drop
cmp /tmp/r $A/n4-$tag && cmp /tmp/r $B/n3-$tag || fail "files written after the restart"
rm $A/r3-$tag $A/r4-$tag $A/n3-$tag $A/n4-$tag
echo "RESTART OK"
