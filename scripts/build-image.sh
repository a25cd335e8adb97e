#!/usr/bin/env bash
# Builds the duet appliance's bootable disk image, target/images/duet.qcow2,
# from Debian 12 packages (mmdebstrap) and duet's two binaries.
#
#   scripts/build-image.sh            # binaries from target/release (built if missing)
#   DUET_BIN_DIR=target/debug scripts/build-image.sh   # what appliance/tests/image.rs does
#
# The disk (2 GiB, MBR, BIOS boot with extlinux):
#   1: ext4 "duet-root", the system (/), ~1.4 GiB
#   2: ext4 "duet-data", /var/lib/duet, 256 MiB as built; grown to the end of
#      the disk on first boot (duet-firstboot.service), so
#      `qemu-img resize duet.qcow2 100G` before the first boot gives duet 100 GiB.
# Needs root (a loop mount to install the boot loader) and, from Debian:
# mmdebstrap, qemu-utils, fdisk, e2fsprogs, extlinux, syslinux-common
# (scripts/install-deps.sh installs them). The .deb files are cached in
# target/images/apt-cache between runs.
#
# Environment: DUET_BIN_DIR (duetd and duetctl), DUET_IMAGE_OUT (default
# target/images), DUET_MIRROR and DUET_SECURITY_MIRROR (default:
# deb.debian.org; bookworm, bookworm-updates and bookworm-security).
#
# Which images: `scripts/build-image.sh [all|qcow2|oci]` (default all):
# `oci` runs only scripts/build-oci.sh (target/images/duet-oci.tar), `qcow2`
# only the disk image; `all` builds the disk image, then the OCI image.
set -euo pipefail
cd "$(dirname "$0")/.."
root_dir=$PWD
kind="${1:-all}"
case "$kind" in
  oci) exec scripts/build-oci.sh ;;
  qcow2|all) ;;
  *) echo "build-image: unknown image kind '$kind' (all, qcow2, oci)" >&2; exit 2 ;;
esac
t0=$(date +%s)

out="${DUET_IMAGE_OUT:-target/images}"
mirror="${DUET_MIRROR:-http://deb.debian.org/debian}"
security="${DUET_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
if [ -n "${DUET_BIN_DIR:-}" ]; then
  bin="$DUET_BIN_DIR"
elif [ -x target/release/duetd ] && [ -x target/release/duetctl ]; then
  bin=target/release
else
  cargo build --locked --release -p duet-appliance -p duet-ctl
  bin=target/release
fi
for b in duetd duetctl; do
  [ -x "$bin/$b" ] || { echo "build-image: $bin/$b is missing" >&2; exit 1; }
done
for t in mmdebstrap qemu-img sfdisk mkfs.ext4 extlinux strip; do
  command -v "$t" >/dev/null || { echo "build-image: $t is missing: run scripts/install-deps.sh" >&2; exit 1; }
done
[ -f /usr/lib/syslinux/mbr/mbr.bin ] || { echo "build-image: /usr/lib/syslinux/mbr/mbr.bin is missing (syslinux-common)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "build-image: run as root (the boot loader is installed through a loop mount)" >&2; exit 1; }

mkdir -p "$out/apt-cache"
out=$(cd "$out" && pwd)
work=$(mktemp -d "$out/work.XXXXXX")
mnt="$work/mnt"
cleanup() {
  mountpoint -q "$mnt" 2>/dev/null && umount "$mnt"
  rm -rf "$work"
}
trap cleanup EXIT
rootfs="$work/rootfs"

# Sizes in MiB.
disk_mib=2048
root_mib=1400
data_mib=256
root_start=1
data_start=$((root_start + root_mib))

echo "build-image: Debian 12 root file system (mmdebstrap)"
packages=systemd-sysv,udev,dbus,linux-image-amd64,initramfs-tools,e2fsprogs,fdisk,util-linux,kmod,procps,iproute2,less
mmdebstrap --variant=minbase --quiet \
  --include="$packages" \
  --aptopt='Acquire::Retries "3"' \
  --setup-hook="mkdir -p \"\$1\"/var/cache/apt/archives" \
  --setup-hook="sync-in '$out/apt-cache' /var/cache/apt/archives" \
  --customize-hook="sync-out /var/cache/apt/archives '$out/apt-cache'" \
  --skip=essential/unlink \
  bookworm "$rootfs" \
  "deb $mirror bookworm main" \
  "deb $mirror bookworm-updates main" \
  "deb $security bookworm-security main"
rm -f "$rootfs"/var/cache/apt/archives/*.deb

echo "build-image: duet"
install -d "$rootfs/usr/local/bin" "$rootfs/etc/duet" "$rootfs/usr/local/lib/duet" "$rootfs/usr/share/doc/duet"
for b in duetd duetctl; do
  strip -o "$rootfs/usr/local/bin/$b" "$bin/$b"
  chmod 755 "$rootfs/usr/local/bin/$b"
done
# The default configuration, serving on every address: SMB, NFS, and the
# admin API and web console (over TLS, [admin] tls = "auto": duetd makes
# its certificate in /var/lib/duet/admin-tls/ on first start).
"$bin/duetd" --print-default-config \
  | sed -e 's|^listen = "127.0.0.1:7445"|listen = "0.0.0.0:7445"|' \
        -e 's|^# The admin API. Keep it on loopback unless a firewall guards it.|# The admin API, on every address in the image (images/README.md).|' \
  >"$rootfs/etc/duet/duetd.toml"
grep -q '^data_dir = "/var/lib/duet"' "$rootfs/etc/duet/duetd.toml"
grep -q '^listen = "0.0.0.0:7445"' "$rootfs/etc/duet/duetd.toml"
"$bin/duetd" --config "$rootfs/etc/duet/duetd.toml" --check-config >/dev/null
cp -a images/rootfs/. "$rootfs/"
install -m644 images/systemd/duetd.service images/systemd/duet-firstboot.service "$rootfs/etc/systemd/system/"
install -m644 images/README.md "$rootfs/usr/share/doc/duet/README.md"
# Completions and man pages, generated from duetctl's CLI definition.
install -d "$rootfs/usr/share/bash-completion/completions" "$rootfs/usr/local/share/man/man1"
"$bin/duetctl" completions bash >"$rootfs/usr/share/bash-completion/completions/duetctl"
"$bin/duetctl" man --out "$rootfs/usr/local/share/man/man1" >/dev/null

echo "build-image: system configuration"
root_uuid=$(cat /proc/sys/kernel/random/uuid)
data_uuid=$(cat /proc/sys/kernel/random/uuid)
cat >"$rootfs/etc/fstab" <<EOF
UUID=$root_uuid / ext4 errors=remount-ro 0 1
UUID=$data_uuid /var/lib/duet ext4 defaults,nofail 0 2
EOF
printf '127.0.0.1\tlocalhost\n127.0.1.1\tduet\n' >"$rootfs/etc/hosts"
chroot "$rootfs" useradd --system --home-dir /var/lib/duet --no-create-home --shell /usr/sbin/nologin --user-group duet
# No network logins exist (no ssh); root logs on at the console with no
# password and must choose one at once.
chroot "$rootfs" passwd -d root >/dev/null
chroot "$rootfs" chage -d 0 root
: >"$rootfs/etc/machine-id"
install -d -m 2755 "$rootfs/var/log/journal"
install -d -m 0750 "$rootfs/var/lib/duet"
systemctl --root="$rootfs" enable duetd.service duet-firstboot.service systemd-networkd.service >/dev/null 2>&1
systemctl --root="$rootfs" mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service >/dev/null 2>&1 || true
kver=$(basename "$(ls -d "$rootfs"/lib/modules/* | head -1)")
[ -f "$rootfs/boot/vmlinuz-$kver" ] && [ -f "$rootfs/boot/initrd.img-$kver" ] || { echo "build-image: no kernel/initrd for $kver" >&2; exit 1; }
install -d "$rootfs/boot/extlinux"
cat >"$rootfs/boot/extlinux/extlinux.conf" <<EOF
DEFAULT duet
PROMPT 0
TIMEOUT 1
LABEL duet
  LINUX /boot/vmlinuz-$kver
  INITRD /boot/initrd.img-$kver
  APPEND root=UUID=$root_uuid ro console=tty0 console=ttyS0,115200n8
EOF

echo "build-image: file systems and disk"
# extlinux reads ext4 without the 64bit feature.
mkfs.ext4 -q -F -L duet-root -U "$root_uuid" -O ^64bit -d "$rootfs" "$work/root.ext4" "${root_mib}M"
mkdir -p "$mnt"
mount -o loop "$work/root.ext4" "$mnt"
extlinux --install "$mnt/boot/extlinux" >/dev/null
umount "$mnt"
mkfs.ext4 -q -F -L duet-data -U "$data_uuid" "$work/data.ext4" "${data_mib}M"
raw="$work/disk.raw"
truncate -s "${disk_mib}M" "$raw"
sfdisk --quiet "$raw" <<EOF
label: dos
start=${root_start}MiB, size=${root_mib}MiB, type=83, bootable
start=${data_start}MiB, size=${data_mib}MiB, type=83
EOF
dd if=/usr/lib/syslinux/mbr/mbr.bin of="$raw" bs=440 count=1 conv=notrunc status=none
dd if="$work/root.ext4" of="$raw" bs=1M seek="$root_start" conv=notrunc,sparse status=none
dd if="$work/data.ext4" of="$raw" bs=1M seek="$data_start" conv=notrunc,sparse status=none
qemu-img convert -q -f raw -O qcow2 "$raw" "$out/duet.qcow2.new"
mv "$out/duet.qcow2.new" "$out/duet.qcow2"
echo "build-image: $out/duet.qcow2 ($(du -h "$out/duet.qcow2" | cut -f1) on disk, ${disk_mib} MiB virtual; kernel $kver) in $(( $(date +%s) - t0 )) s"
if [ "$kind" = all ]; then
  DUET_BIN_DIR="$bin" DUET_IMAGE_OUT="$out" scripts/build-oci.sh
fi
