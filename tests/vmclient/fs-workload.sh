#!/bin/sh
# fs-workload.sh DIR BIG_MB: a file-system workload for a mounted share, run
# inside ../shared/vmclient/linux-client (busybox sh). Every step checks its
# result (contents by md5sum) and the script stops at the first failure
# (sh -e). Prints "step NAME ok <centiseconds>" per step and
# "WORKLOAD OK" at the end.
set -eu
MNT=$1; BIG_MB=${2:-16}; N=${N:-300}
# SKIP: steps a protocol cannot do (e.g. "symlink attrs" for cifs without
# POSIX extensions, whose modes and symlinks are client-side fictions).
SKIP=${SKIP:-}
skip() { case " $SKIP " in *" $1 "*) echo "step $1 skipped"; return 0;; esac; return 1; }
[ "$BIG_MB" -ge 8 ] || BIG_MB=8   # the patch below crosses the 4 MiB chunk boundary
D=$MNT/wl-$(cat /proc/sys/kernel/random/uuid | cut -c1-8)
now() { cut -d' ' -f1 /proc/uptime | tr -d .; }
T0=$(now)
step() { t=$(now); echo "step $1 ok $((t - T0))"; T0=$t; }
fail() { echo "WORKLOAD FAIL: $*"; exit 1; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
size() { stat -c %s "$1"; }

mkdir "$D"; cd "$D"
[ -d "$D" ] || fail "mkdir $D"

# Many small files: write, read back after dropping the cache, checksum.
L=/tmp/wl-src; rm -rf $L; mkdir $L
i=0; while [ $i -lt $N ]; do head -c 4096 /dev/urandom > $L/f$i; i=$((i+1)); done
(cd $L && md5sum f* > /tmp/wl-small.md5)
i=0; while [ $i -lt $N ]; do cp $L/f$i f$i; i=$((i+1)); done
step small-write
drop
md5sum -c /tmp/wl-small.md5 > /tmp/wl-check.out 2>&1 || { grep -v ': OK$' /tmp/wl-check.out | head; fail "small files differ"; }
step small-read
[ "$(ls | wc -l)" -eq "$N" ] || fail "ls counts $(ls | wc -l), not $N"
ls -l > /tmp/wl-ls.out
[ "$(grep -c ' 4096 ' /tmp/wl-ls.out)" -eq "$N" ] || { head -5 /tmp/wl-ls.out; fail "ls -l sizes"; }
[ "$(ls -a | grep -c '^\.\.\?$')" -eq 2 ] || fail "ls -a does not show . and .."
[ "$(stat -c %i ..)" = "$(stat -c %i "$MNT")" ] || fail "the inode of .. is not the mount's"
step ls

# A big file, written one MiB per write() as cp or an application would (a
# pipe through tee makes 4-8 KiB writes, and on a cifs mount without an
# oplock each one is a round trip). Every MiB is distinct (its number at
# the front), so data at the wrong place shows; checksummed as written
# (sha256: faster than md5 under qemu's emulation).
head -c 1048560 /dev/urandom > /tmp/wl-seed
i=0
while [ $i -lt $BIG_MB ]; do
  { printf '%016d' $i; cat /tmp/wl-seed; } > /tmp/wl-blk
  dd if=/tmp/wl-blk of=big bs=1M seek=$i conv=notrunc 2>/dev/null || echo "dd failed at MiB $i" >&2
  cat /tmp/wl-blk
  i=$((i+1))
done | sha256sum | cut -d' ' -f1 > /tmp/wl-big.sum
sync
[ "$(size big)" -eq $((BIG_MB * 1048576)) ] || fail "big file size $(size big)"
step big-write
drop
[ "$(dd if=big bs=1M 2>/dev/null | sha256sum | cut -d' ' -f1)" = "$(cat /tmp/wl-big.sum)" ] || fail "big file differs"
step big-read
# Overwrite in the middle of the big file (crosses a 4 MiB chunk boundary).
head -c 8192 /dev/urandom > /tmp/wl-patch
dd if=/tmp/wl-patch of=big bs=4096 seek=1023 conv=notrunc 2>/dev/null
drop
[ "$(size big)" -eq $((BIG_MB * 1048576)) ] || fail "big size after patch"
[ "$(dd if=big bs=4096 skip=1023 count=2 2>/dev/null | md5sum)" = "$(md5sum < /tmp/wl-patch)" ] || fail "big patch differs"
rm big
step big-patch

# Overwrite in the middle, truncate down and up: compared with a local copy.
head -c 1048576 /dev/urandom > /tmp/wl-m; cp /tmp/wl-m m
head -c 3000 /dev/urandom > /tmp/wl-p
dd if=/tmp/wl-p of=m bs=1 seek=5000 conv=notrunc 2>/dev/null
dd if=/tmp/wl-p of=/tmp/wl-m bs=1 seek=5000 conv=notrunc 2>/dev/null
dd if=/tmp/wl-p of=f7 bs=1 seek=1000 conv=notrunc 2>/dev/null
dd if=/tmp/wl-p of=$L/f7 bs=1 seek=1000 conv=notrunc 2>/dev/null
drop
[ "$(md5sum < m)" = "$(md5sum < /tmp/wl-m)" ] || fail "overwrite in the middle (1 MiB)"
[ "$(md5sum < f7)" = "$(md5sum < $L/f7)" ] || fail "overwrite in the middle (small)"
step overwrite
truncate -s 70000 m; truncate -s 70000 /tmp/wl-m
truncate -s 1000 f8; truncate -s 1000 $L/f8
drop
[ "$(size m)" -eq 70000 ] && [ "$(md5sum < m)" = "$(md5sum < /tmp/wl-m)" ] || fail "truncate down (big)"
[ "$(size f8)" -eq 1000 ] && [ "$(md5sum < f8)" = "$(md5sum < $L/f8)" ] || fail "truncate down (small)"
truncate -s 200000 m; truncate -s 200000 /tmp/wl-m
truncate -s 9000 f8; truncate -s 9000 $L/f8
drop
[ "$(size m)" -eq 200000 ] && [ "$(md5sum < m)" = "$(md5sum < /tmp/wl-m)" ] || fail "truncate up (big)"
[ "$(size f8)" -eq 9000 ] && [ "$(md5sum < f8)" = "$(md5sum < $L/f8)" ] || fail "truncate up (small)"
: > f9; [ "$(size f9)" -eq 0 ] || fail "truncate to zero"
echo appended >> f9; [ "$(cat f9)" = appended ] || fail "append"
step truncate

# Directories.
mkdir -p a/b/c
[ -d a/b/c ] || fail "mkdir -p"
rmdir a/b/c; rmdir a/b
[ ! -e a/b ] || fail "rmdir"
if rmdir a 2>/dev/null; then mkdir a; else fail "rmdir of an empty directory"; fi
mkdir a/x; echo in > a/x/file
if rmdir a/x 2>/dev/null; then fail "rmdir of a non-empty directory succeeded"; fi
step dirs

# Rename: a file, over an existing file, a directory, across directories.
mv f1 g1
[ ! -e f1 ] && [ "$(md5sum < g1)" = "$(md5sum < $L/f1)" ] || fail "rename"
mv f2 g1
[ ! -e f2 ] && [ "$(md5sum < g1)" = "$(md5sum < $L/f2)" ] || fail "rename over a file"
mv a/x a/y; mv a/y/file g2; mv a/y y
[ "$(cat g2)" = in ] && [ -d y ] && [ ! -e a/y ] || fail "rename across directories"
drop
[ "$(ls | grep -c '^f')" -eq $((N - 2)) ] || fail "listing after renames"
step rename

# Hard links.
if ! skip hardlink; then
ln f3 h3
[ "$(stat -c %h f3)" -eq 2 ] && [ "$(stat -c %h h3)" -eq 2 ] || fail "link count $(stat -c %h f3)"
[ "$(stat -c %i f3)" = "$(stat -c %i h3)" ] || fail "hard link inode"
echo more >> h3; drop
[ "$(md5sum < f3)" = "$(md5sum < h3)" ] || fail "hard link contents"
rm f3
[ "$(stat -c %h h3)" -eq 1 ] && [ "$(size h3)" -eq 4101 ] || fail "link after unlink"
step hardlink
fi

# Symbolic links.
if ! skip symlink; then
ln -s f4 s4; ln -s ../nowhere dangling; ln -s "$D/y" sdir
[ "$(readlink s4)" = f4 ] && [ "$(readlink dangling)" = ../nowhere ] || fail "readlink"
[ -L s4 ] && [ "$(md5sum < s4)" = "$(md5sum < $L/f4)" ] || fail "read through a symlink"
[ -d sdir ] && [ ! -e dangling ] || fail "symlink targets"
rm s4 dangling sdir
[ -e f4 ] || fail "rm of a symlink removed its target"
step symlink
fi

# chmod and timestamps.
if ! skip attrs; then
chmod 600 f5; [ "$(stat -c %a f5)" = 600 ] || fail "chmod"
touch -d '2001-02-03 04:05:06' f5; [ "$(stat -c %Y f5)" = "$(date -d '2001-02-03 04:05:06' +%s)" ] || fail "utimes"
step attrs
fi

# Exclusive create (O_EXCL: NFSv3 EXCLUSIVE, NFSv4.1 EXCLUSIVE4_1), a FIFO,
# a write past the end (a hole), find, df.
(set -C; echo one > excl) || fail "exclusive create"
if (set -C; echo two > excl) 2>/dev/null; then fail "exclusive create of an existing file succeeded"; fi
[ "$(cat excl)" = one ] || fail "exclusive create contents"
if ! skip fifo; then mkfifo p; [ -p p ] || fail "mkfifo"; rm p; fi
printf x | dd of=hole bs=1 seek=100000 2>/dev/null; drop
[ "$(size hole)" -eq 100001 ] || fail "hole size $(size hole)"
[ "$(head -c 100000 hole | md5sum)" = "$(head -c 100000 /dev/zero | md5sum)" ] && [ "$(tail -c 1 hole)" = x ] || fail "hole contents"
[ "$(find . -type f | wc -l)" -eq "$(ls -l | grep -c '^-')" ] || fail "find and ls disagree"
df -k "$MNT" | tail -1 | awk '{ exit !($2 > 0) }' || fail "df shows no size"
# The host checks these against the data volume (vmclient.rs check_df).
df -k "$MNT" | tail -1 | awk '{ print "DF " $2 " " $4 }'
step special

# Locks (util-linux flock, given with --bin; NFSv4 sends LOCK/LOCKU, NFSv3
# with nolock keeps them local). A second exclusive lock must wait.
if ! skip locks; then
  command -v flock >/dev/null || fail "flock is missing in the guest (linux-client --bin)"
  : > lk
  flock -x lk -c 'echo locked > lk.out' || fail "flock -x"
  flock -s lk -c true || fail "flock -s"
  flock -x lk -c 'sleep 3' & sleep 1
  if flock -n -x lk -c true 2>/dev/null; then fail "a second exclusive lock was granted"; fi
  wait
  flock -n -x lk -c true || fail "the lock was not released"
  if grep -q " $MNT nfs4 " /proc/mounts; then
    # The kernel's per-operation counts: LOCK and LOCKU went to the server.
    ops=$(awk -v m="$MNT" '$1 == "device" { on = ($5 == m) } on && ($1 == "LOCK:" || $1 == "LOCKU:") { n += $2 } END { print n + 0 }' /proc/self/mountstats)
    [ "$ops" -ge 4 ] || fail "only $ops LOCK/LOCKU calls reached the server"
  fi
  step locks
else
  echo "note: no flock in the guest; locks not tested"
fi

# rm -r of the whole tree.
cd /; rm -r "$D"
[ ! -e "$D" ] || fail "rm -r"
drop
ls "$MNT" | grep -q "^$(basename $D)\$" && fail "rm -r left the directory"
step rm-r
echo "WORKLOAD OK"
