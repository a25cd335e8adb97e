# acl.sh: one ACL model for both protocols with the Linux kernel as NFS
# client (issue 17), run inside ../shared/vmclient/linux-client by
# appliance/tests/vmclient.rs. The host changes and reads the file's DACL
# with Samba's smbcacls when asked on CTRL_PORT (deny-3002: add a deny of
# READ_DATA for S-1-22-1-3002; show: report the DACL); the guest reads as
# other uids over an NFSv4.2 mount (busybox su) and sets an NFSv4 ACL
# with nfs4_setfacl (Debian's nfs4-acl-tools, unpacked into
# /opt/duet-vm-tools by scripts/install-deps.sh). Needs NFS_PORT and
# CTRL_PORT; the share `acl` exists without root squash.
H=10.0.2.2
ctl() { printf '%s\n' "$1" | nc $H "$CTRL_PORT"; }
printf 'root:x:0:0::/:/bin/sh\nu3002:x:3002:3002::/:/bin/sh\nu3003:x:3003:3003::/:/bin/sh\n' > /etc/passwd
printf 'root:x:0:\nu3002:x:3002:\nu3003:x:3003:\n' > /etc/group
as() { u=$1; shift; su -s /bin/sh u$u -c "$*"; }
fail() { echo "ACL FAIL: $1"; exit 1; }
mkdir -p /mnt/n
mount -t nfs4 $H:/acl /mnt/n -o addr=$H,vers=4.2,port=$NFS_PORT || fail "mount"
echo secret > /mnt/n/acl.txt || fail "write"
chown 3001:3001 /mnt/n/acl.txt && chmod 644 /mnt/n/acl.txt || fail "chown"
# A DACL set over SMB denies uid 3002 over the kernel mount; uid 3003 reads.
[ "$(as 3002 cat /mnt/n/acl.txt)" = secret ] || fail "uid 3002 cannot read under 0644"
[ "$(ctl deny-3002)" = ok ] || fail "smbcacls -a"
if as 3002 cat /mnt/n/acl.txt; then fail "uid 3002 read through the DACL"; fi
echo "ACL step smb dacl denies 3002"
[ "$(as 3003 cat /mnt/n/acl.txt)" = secret ] && echo "ACL step 3003 reads"
# The kernel sees it as an NFSv4 ACL.
nfs4_getfacl /mnt/n/acl.txt
nfs4_getfacl /mnt/n/acl.txt | grep -q '^D::3002:r' && echo "ACL step nfs4_getfacl shows the deny"
# An NFSv4 ACL set with nfs4_setfacl: smbcacls sees it, it binds.
nfs4_setfacl -a "D::3003:r" /mnt/n/acl.txt || fail "nfs4_setfacl"
[ "$(ctl show)" = "3003-denied" ] && echo "ACL step smbcacls shows nfs4_setfacl's ace"
if as 3003 cat /mnt/n/acl.txt; then fail "uid 3003 read through the NFSv4 ACL"; fi
echo "ACL step nfs4 acl denies 3003"
# chmod over NFS: the DACL is the mode's.
chmod 600 /mnt/n/acl.txt || fail "chmod"
[ "$(ctl show)" = "mode-only" ] && echo "ACL step chmod shows in the dacl"
umount /mnt/n
echo "ACL OK"
