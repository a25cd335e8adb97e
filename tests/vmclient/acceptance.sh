#!/bin/sh
# acceptance.sh: the guest side of appliance/tests/vmclient.rs, run by
# ../shared/vmclient/linux-client with fs-workload.sh, cross-protocol.sh,
# restart.sh, xattr.sh, util-linux's flock and attr's setfattr and getfattr
# given as --bin. The test prepends:
#   NFS_PORT SMB_PORT SMB_USER SMB_PASS SMB_UID  ports on the host (10.0.2.2)
#   CTRL_PORT  where the host restarts duetd when asked (restart runs)
#   RUNS  e.g. "v3:256 v4.1:256 v4.2:256 cross:v4.2 pseudo:4.1 smb3.1.1:64"
#         (NFS version:big file MiB, cross:NFS version, pseudo:NFSv4 minor,
#         restart:NFSv4 version, xattr:NFSv4 version, layers:NFSv4 version; smb3.1.1|smb3.0|smb2.1|smbseal:big file
#         MiB mount cifs with that dialect, smbseal with encryption)
# Each run prints "RESULT <name> PASS" or "RESULT <name> FAIL <status>".
H=10.0.2.2
mount_nfs() { # VERS DIR
  mkdir -p "$2"
  case $1 in
    3) mount -t nfs $H:/public "$2" -o addr=$H,vers=3,nolock,port=$NFS_PORT,mountport=$NFS_PORT,tcp,mountproto=tcp ;;
    *) mount -t nfs4 $H:/public "$2" -o addr=$H,vers=$1,port=$NFS_PORT ;;
  esac
}
mount_smb() { # DIR [VERS] [EXTRA_OPTIONS]
  mkdir -p "$1"
  mount -t cifs //$H/public "$1" -o ip=$H,port=$SMB_PORT,username=$SMB_USER,password=$SMB_PASS,vers=${2:-3.1.1},uid=$SMB_UID,gid=$SMB_UID${3:+,$3}
}
echo "$SMB_USER:x:$SMB_UID:$SMB_UID::/tmp:/bin/sh" >> /etc/passwd
echo "$SMB_USER:x:$SMB_UID:" >> /etc/group
for run in $RUNS; do
  name=${run%%:*}; arg=${run#*:}
  echo "=== run $name $arg"
  rc=0
  case $name in
    v3|v4.1|v4.2)
      v=${name#v}; mnt=/mnt/$name
      if mount_nfs "$v" $mnt; then
        grep " $mnt " /proc/mounts
        sh -e /bin/fs-workload.sh $mnt "$arg" || rc=$?
        umount $mnt || { echo "umount $mnt failed"; rc=${rc:-1}; [ $rc -ne 0 ] || rc=1; }
      else
        rc=32
      fi ;;
    smb3.1.1|smb3.0|smb2.1|smbseal)
      mnt=/mnt/$name
      case $name in
        smbseal) ok=$(mount_smb $mnt 3.1.1 seal && echo y) ;;
        *) ok=$(mount_smb $mnt ${name#smb} && echo y) ;;
      esac
      if [ "$ok" = y ]; then
        grep " $mnt " /proc/mounts
        N=${SMB_N:-100} SKIP="symlink attrs fifo locks" sh -e /bin/fs-workload.sh $mnt "$arg" || rc=$?
        umount $mnt || rc=1
      else
        rc=32
      fi ;;
    cross)
      v=${arg#v}
      if mount_nfs "$v" /mnt/xn && mount_smb /mnt/xs; then
        sh -e /bin/cross-protocol.sh /mnt/xn /mnt/xs "$SMB_USER" || rc=$?
        umount /mnt/xn; umount /mnt/xs
      else
        rc=32
      fi ;;
    xattr)
      # NFSv4.2 extended attributes and SMB EAs: one store (xattr.sh).
      if mount_nfs "$arg" /mnt/an && mount_smb /mnt/as; then
        NFS_PORT=$NFS_PORT sh -e /bin/xattr.sh /mnt/an /mnt/as || rc=$?
        umount /mnt/an; umount /mnt/as
      else
        rc=32
      fi ;;
    layers)
      # Snapshots and clones (layers.sh; the host takes them when asked).
      if mount_nfs "$arg" /mnt/ln && mount_smb /mnt/ls; then
        NFS_PORT=$NFS_PORT SMB_PORT=$SMB_PORT SMB_USER=$SMB_USER SMB_PASS=$SMB_PASS SMB_UID=$SMB_UID CTRL_PORT=$CTRL_PORT \
          sh -e /bin/layers.sh /mnt/ln /mnt/ls || rc=$?
        umount /mnt/ln; umount /mnt/ls
      else
        rc=32
      fi ;;
    restart)
      # duetd restarts (the host does it when restart.sh asks on CTRL_PORT).
      if mount_nfs 3 /mnt/r3 && mount_nfs "$arg" /mnt/r4; then
        CTRL_PORT=$CTRL_PORT sh -e /bin/restart.sh /mnt/r3 /mnt/r4 || rc=$?
        umount /mnt/r3; umount /mnt/r4
      else
        rc=32
      fi ;;
    pseudo)
      # The NFSv4 pseudo-root lists the exports; the share is a directory in it.
      mkdir -p /mnt/pr
      if mount -t nfs4 $H:/ /mnt/pr -o addr=$H,vers=$arg,port=$NFS_PORT; then
        ls -la /mnt/pr
        ls /mnt/pr | grep -qx public || { echo "the pseudo-root does not list public"; rc=1; }
        echo pseudo > /mnt/pr/public/pseudo-$$ && [ "$(cat /mnt/pr/public/pseudo-$$)" = pseudo ] && rm /mnt/pr/public/pseudo-$$ || rc=1
        umount /mnt/pr || rc=1
      else
        rc=32
      fi ;;
    *) echo "unknown run $name"; rc=2 ;;
  esac
  if [ $rc -eq 0 ]; then echo "RESULT $name PASS"; else echo "RESULT $name FAIL $rc"; fi
done
echo "=== acceptance done"
