# cifs-leases.sh: issue 13's lease acceptance with the Linux kernel as
# client, run inside ../shared/vmclient/linux-client by
# appliance/tests/vmclient.rs. The share mounted three ways in one guest:
# cifs 3.1.1 (cache=strict, the default: caches under leases), cifs 3.1.1
# with cache=none, and NFSv4.2. Prints the time of many small write()s to
# one open file on each cifs mount (a write-caching lease turns them into
# page-cache writes; without one every write() is a round trip), then
# checks, every time, that data written through cifs and still cached
# there (the file still open) reads complete through NFS, and that data
# NFS writes over a file cifs has cached reads new through cifs.
# Needs NFS_PORT SMB_PORT SMB_USER SMB_PASS SMB_UID.
set -e
H=10.0.2.2
echo "$SMB_USER:x:$SMB_UID:$SMB_UID::/tmp:/bin/sh" >> /etc/passwd
echo "$SMB_USER:x:$SMB_UID:" >> /etc/group
fail() { echo "LEASES FAIL: $*"; exit 1; }
sum() { md5sum < "$1" | cut -d' ' -f1; }
cs() { cut -d' ' -f1 /proc/uptime | tr -d .; }
mkdir -p /c /cn /n
opts="ip=$H,port=$SMB_PORT,username=$SMB_USER,password=$SMB_PASS,vers=3.1.1,uid=$SMB_UID,gid=$SMB_UID"
mount -t cifs //$H/public /c -o $opts
mount -t cifs //$H/public /cn -o $opts,cache=none
mount -t nfs4 $H:/public /n -o addr=$H,vers=4.2,port=$NFS_PORT
grep cifs /proc/mounts
# Many small write()s to one open file: 3000 x 64 bytes.
t0=$(cs); dd if=/dev/zero of=/c/small-cached.bin bs=64 count=3000 2>/dev/null; t1=$(cs)
dd if=/dev/zero of=/cn/small-none.bin bs=64 count=3000 2>/dev/null; t2=$(cs)
cached=$((t1 - t0)); none=$((t2 - t1))
[ "$cached" -gt 0 ] || cached=1
echo "LEASES small writes: cache=strict ${cached}0 ms, cache=none ${none}0 ms"
echo "LEASES SPEEDUP $((none * 10 / cached))"
[ "$(stat -c %s /n/small-cached.bin)" = 192000 ] || fail "the cached file's size over NFS"
for i in 1 2 3 4 5; do
  head -c 200000 /dev/urandom > /tmp/src
  # cifs -> NFS: written and still open (cached in the cifs page cache).
  exec 3> /c/co$i.bin
  cat /tmp/src >&3
  [ "$(sum /n/co$i.bin)" = "$(sum /tmp/src)" ] || fail "round $i: cifs data still cached were not read complete over NFS"
  exec 3>&-
  echo "LEASES cifs-to-nfs $i ok"
  # NFS -> cifs: cifs has read (cached) the file, NFS overwrites it.
  cat /c/co$i.bin > /dev/null
  head -c 200000 /dev/urandom > /tmp/new
  su "$SMB_USER" -c "dd if=/tmp/new of=/n/co$i.bin bs=65536 conv=notrunc 2>/dev/null" || cat /tmp/new > /n/co$i.bin
  [ "$(sum /c/co$i.bin)" = "$(sum /tmp/new)" ] || fail "round $i: NFS's overwrite was not read over cifs"
  echo "LEASES nfs-to-cifs $i ok"
done
umount /c /cn /n
echo "LEASES OK"
