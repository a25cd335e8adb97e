#!/bin/sh
# xattr.sh NFSDIR SMBDIR: the kernel's NFSv4.2 extended attributes (RFC
# 8276) and cifs' user.* attributes (SMB EAs) on the same duet share are one
# store. NFS names are exact; SMB writes its names in upper case, as NTFS
# does. NFSDIR must be an NFSv4.2 mount of the share SMBDIR mounts over cifs.
set -e
n=$1; s=$2
f=xattr-$$
# Created over NFS (root is squashed to nobody, the owner) and made
# writable for the SMB user, who is not the owner.
echo data > $n/$f
chmod 666 $n/$f
setfattr -n user.color -v blue $n/$f
[ "$(getfattr --only-values -n user.color $n/$f)" = blue ]
setfattr -n user.color -v green $n/$f
setfattr -n user.size -v 3 $n/$f
getfattr -d $n/$f > /tmp/xa.txt
cat /tmp/xa.txt
grep -q 'user.color="green"' /tmp/xa.txt
grep -q 'user.size="3"' /tmp/xa.txt
echo "step nfs ok"
# The same attributes through SMB.
[ "$(getfattr --only-values -n user.color $s/$f)" = green ]
setfattr -n user.shape -v round $s/$f
echo "step smb ok"
# Seen by NFS under the name SMB stored (after a fresh mount: the NFS
# client caches attributes).
umount $n
mount -t nfs4 10.0.2.2:/public $n -o addr=10.0.2.2,vers=4.2,port=$NFS_PORT
[ "$(getfattr --only-values -n user.SHAPE $n/$f)" = round ]
setfattr -x user.color $n/$f
if getfattr -n user.color $n/$f 2>/dev/null; then echo "user.color survived its removal"; exit 1; fi
if getfattr -n user.color $s/$f 2>/dev/null; then echo "SMB still sees user.color"; exit 1; fi
rm $n/$f
echo "XATTR OK"
