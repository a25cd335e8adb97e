#!/usr/bin/env bash
# Builds duet's OCI container image, target/images/duet-oci.tar (an OCI
# image layout in a tar: `podman load -i target/images/duet-oci.tar`),
# without pulling anything from a registry: the root file system is
# Debian 12 minbase from mmdebstrap (no kernel, no systemd) plus duet's
# binaries, and umoci writes it as one layer with its image configuration.
#
#   scripts/build-oci.sh                                 # binaries from target/release (built if missing)
#   DUET_BIN_DIR=target/debug scripts/build-oci.sh       # what appliance/tests/oci.rs does
#
# scripts/build-image.sh calls it (`scripts/build-image.sh oci` builds only
# this). Needs root (the root file system holds root-owned files) and
# mmdebstrap, umoci, binutils (scripts/install-deps.sh). The .deb files are
# cached in target/images/apt-cache, shared with the disk image.
# Environment: DUET_BIN_DIR, DUET_IMAGE_OUT (default target/images),
# DUET_MIRROR, DUET_SECURITY_MIRROR (as scripts/build-image.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
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
  [ -x "$bin/$b" ] || { echo "build-oci: $bin/$b is missing" >&2; exit 1; }
done
for t in mmdebstrap umoci strip tar; do
  command -v "$t" >/dev/null || { echo "build-oci: $t is missing: run scripts/install-deps.sh" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "build-oci: run as root (the root file system holds root-owned files)" >&2; exit 1; }

mkdir -p "$out/apt-cache"
out=$(cd "$out" && pwd)
work=$(mktemp -d "$out/oci-work.XXXXXX")
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"

echo "build-oci: Debian 12 root file system (mmdebstrap minbase)"
# duetd links libstdc++ (RocksDB); setpriv (util-linux) drops to the duet user.
mmdebstrap --variant=minbase --quiet \
  --include=libstdc++6,util-linux \
  --aptopt='Acquire::Retries "3"' \
  --setup-hook="mkdir -p \"\$1\"/var/cache/apt/archives" \
  --setup-hook="sync-in '$out/apt-cache' /var/cache/apt/archives" \
  --customize-hook="sync-out /var/cache/apt/archives '$out/apt-cache'" \
  --skip=essential/unlink \
  bookworm "$rootfs" \
  "deb $mirror bookworm main" \
  "deb $mirror bookworm-updates main" \
  "deb $security bookworm-security main"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/*/changelog*

echo "build-oci: duet"
install -d "$rootfs/usr/local/bin" "$rootfs/etc/duet" "$rootfs/usr/local/lib/duet" "$rootfs/usr/share/doc/duet"
for b in duetd duetctl; do
  strip -o "$rootfs/usr/local/bin/$b" "$bin/$b"
  chmod 755 "$rootfs/usr/local/bin/$b"
done
# The default configuration with the admin API on every address of the
# container (publish 7445 only where a firewall guards it) and the data
# directory on the volume /var/lib/duet.
"$bin/duetd" --print-default-config \
  | sed -e 's|^listen = "127.0.0.1:7445"|listen = "0.0.0.0:7445"|' \
        -e 's|^# The admin API. Keep it on loopback unless a firewall guards it.|# The admin API, on every address of the container (images/README.md).|' \
  >"$rootfs/etc/duet/duetd.toml"
grep -q '^data_dir = "/var/lib/duet"' "$rootfs/etc/duet/duetd.toml"
grep -q '^listen = "0.0.0.0:7445"' "$rootfs/etc/duet/duetd.toml"
"$bin/duetd" --config "$rootfs/etc/duet/duetd.toml" --check-config >/dev/null
install -m755 images/oci/entrypoint "$rootfs/usr/local/lib/duet/entrypoint"
install -m755 images/oci/healthcheck "$rootfs/usr/local/lib/duet/healthcheck"
install -m644 images/README.md "$rootfs/usr/share/doc/duet/README.md"
install -d "$rootfs/usr/share/bash-completion/completions" "$rootfs/usr/local/share/man/man1"
"$bin/duetctl" completions bash >"$rootfs/usr/share/bash-completion/completions/duetctl"
"$bin/duetctl" man --out "$rootfs/usr/local/share/man/man1" >/dev/null
chroot "$rootfs" useradd --system --home-dir /var/lib/duet --no-create-home --shell /usr/sbin/nologin --user-group duet
install -d -m 0750 "$rootfs/var/lib/duet"
chroot "$rootfs" chown duet:duet /var/lib/duet
printf 'duet\n' >"$rootfs/etc/hostname"
: >"$rootfs/etc/machine-id"

echo "build-oci: OCI image (umoci)"
layout="$work/layout"
umoci init --layout "$layout"
umoci new --image "$layout:duet"
umoci insert --image "$layout:duet" "$rootfs" /
version=$("$bin/duetd" --version | awk '{print $2}')
umoci config --image "$layout:duet" \
  --author="duet" \
  --os=linux --architecture=amd64 \
  --config.entrypoint=/usr/local/lib/duet/entrypoint \
  --config.workingdir=/var/lib/duet \
  --config.stopsignal=SIGTERM \
  --config.volume=/var/lib/duet \
  --config.exposedports=445/tcp --config.exposedports=2049/tcp \
  --config.exposedports=111/tcp --config.exposedports=111/udp \
  --config.exposedports=7445/tcp \
  --config.env='PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --config.label=org.opencontainers.image.title=duet \
  --config.label="org.opencontainers.image.version=$version" \
  --config.label=duet.healthcheck=/usr/local/lib/duet/healthcheck \
  --history.created_by="scripts/build-oci.sh"
umoci gc --layout "$layout"
tar -C "$layout" -cf "$out/duet-oci.tar.new" .
mv "$out/duet-oci.tar.new" "$out/duet-oci.tar"
echo "build-oci: $out/duet-oci.tar ($(du -h "$out/duet-oci.tar" | cut -f1), duet $version) in $(( $(date +%s) - t0 )) s"
