# nlm.sh: NFSv3 locks through NLM v4 with the Linux kernel as client
# (issue 13), run inside ../shared/vmclient/linux-client by
# appliance/tests/vmclient.rs. The guest gets rpcbind and rpc.statd from
# Debian's rpcbind and nfs-common packages (unpacked by
# scripts/install-deps.sh into /opt/duet-vm-tools, not installed on the
# host), so the kernel's lockd and NSM work and the mount needs no
# `nolock`. The host holds and tries SMB byte-range locks on the same file
# when asked on CTRL_PORT: smb-lock, smb-unlock, smb-try (granted or
# conflict). Needs NFS_PORT and CTRL_PORT; duetd's portmapper on 111.
set -e
H=10.0.2.2
export LD_LIBRARY_PATH=/opt/duet-vm-tools/usr/lib/x86_64-linux-gnu
mkdir -p /run/rpcbind /var/lib/nfs/sm /var/lib/nfs/sm.bak /var/run /etc
printf 'root:x:0:0::/:/bin/sh\n_rpc:x:0:0::/run/rpcbind:/bin/sh\nstatd:x:0:0::/var/lib/nfs:/bin/sh\n' > /etc/passwd
echo "root:x:0:" > /etc/group
printf 'udp tpi_clts v inet udp - -\ntcp tpi_cots_ord v inet tcp - -\nlocal tpi_cots_ord - loopback - - -\n' > /etc/netconfig
printf 'sunrpc 111/tcp portmapper\nsunrpc 111/udp portmapper\n' > /etc/services
printf 'ip 0 IP\ntcp 6 TCP\nudp 17 UDP\n' > /etc/protocols
rpcbind -w
sleep 1
rpc.statd --no-notify
sleep 1
ctl() { printf '%s\n' "$1" | nc $H "$CTRL_PORT"; }
mount -t nfs $H:/public /mnt -o addr=$H,vers=3,port=$NFS_PORT,mountport=$NFS_PORT,tcp,mountproto=tcp
grep -q 'local_lock=none' /proc/mounts && echo "NLM mounted without nolock"
echo "locked by nlm" > /mnt/nlm.txt
chmod 666 /mnt/nlm.txt
# Uncontended: an NLM LOCK and UNLOCK.
flock -n /mnt/nlm.txt -c true && echo "NLM step uncontended ok"
# An SMB client's lock keeps the kernel's NLM lock out.
[ "$(ctl smb-lock)" = locked ] && echo "NLM step smb holds"
if flock -n /mnt/nlm.txt -c true; then echo "NLM FAIL: the SMB lock was ignored"; else echo "NLM step conflict ok"; fi
[ "$(ctl smb-unlock)" = unlocked ]
flock -n /mnt/nlm.txt -c true && echo "NLM step after smb unlock ok"
# The kernel's NLM lock keeps the SMB client out while held, not after.
flock -n /mnt/nlm.txt -c "printf 'smb-try\n' | nc $H $CTRL_PORT > /tmp/held"
[ "$(cat /tmp/held)" = conflict ] && echo "NLM step smb refused while held"
[ "$(ctl smb-try)" = granted ] && echo "NLM step smb granted after release"
# fcntl-style byte ranges (flock on NFS is a whole-file POSIX lock): two
# holders in this guest conflict through the server.
flock -n /mnt/nlm.txt -c "if flock -n /mnt/nlm.txt -c true; then echo 'NLM FAIL: second holder'; else echo 'NLM step second holder refused'; fi" || true
umount /mnt
echo "NLM OK"
