#!/usr/bin/env bash
# Installs what building and testing duet needs on Debian 12, if missing.
set -euo pipefail
need=()
# Installed, not merely known (a removed package keeps its configuration
# files and `dpkg -s` still succeeds for it).
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }
command -v clang >/dev/null 2>&1 || need+=(clang)
installed libclang-dev || need+=(libclang-dev)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
# Real clients the test suite drives: smbtorture and smbclient (SMB),
# libnfs-utils (NFS), pynfs (../shared/conformance/pynfs-run: python3 and
# its ply module), and qemu with a Debian kernel for the kernel-client
# tests (../shared/vmclient/linux-client); the Prometheus project's Python
# client, whose OpenMetrics parser checks /metrics (appliance/tests/metrics.rs);
# util-linux's script(1) gives duetctl's confirmation test a terminal;
# scripts/build-image.sh and appliance/tests/image.rs: mmdebstrap,
# qemu-utils (qemu-img), fdisk (sfdisk), e2fsprogs, extlinux and
# syslinux-common (the BIOS boot loader), binutils (strip); systemd's
# journalctl reads the booted image's journal; scripts/build-oci.sh: umoci;
# podman and runc run the container image (crun 1.8 refuses hybrid cgroups);
# chromium and chromium-driver drive the web console (appliance/tests/console.rs); curl;
# iptables cuts links between cluster nodes (appliance/tests/cluster_partition.rs).
wanted=(samba-testsuite smbclient libnfs-utils python3 python3-ply qemu-system-x86 linux-image-amd64 busybox-static cpio kmod python3-prometheus-client bsdutils attr mmdebstrap qemu-utils fdisk e2fsprogs extlinux syslinux-common binutils systemd umoci podman runc chromium chromium-driver curl iptables "$@")
for p in "${wanted[@]}"; do
  installed "$p" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  # An install may remove what was there: a machine with a newer
  # qemu-utils (backports) loses it when qemu-system-x86 brings Debian's
  # own qemu-block-extra. Check the whole list again and install what
  # went missing.
  again=()
  for p in "${wanted[@]}"; do
    installed "$p" || again+=("$p")
  done
  if [ ${#again[@]} -gt 0 ]; then
    echo "install-deps: installing again ${again[*]} (removed by the install above)"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${again[@]}" >/dev/null
  fi
fi
# The python3 first on PATH may not be Debian's (pyenv, a venv): pynfs-run
# imports ply with it, so give that one ply too.
if ! python3 -c 'import ply' >/dev/null 2>&1; then
  echo "install-deps: installing ply for $(command -v python3)"
  python3 -m pip install -q ply 2>/dev/null || python3 -m pip install -q --break-system-packages ply
fi
# The kernel-client NLM test (appliance/tests/vmclient.rs,
# tests/vmclient/nlm.sh) gives its guest rpcbind and rpc.statd: Debian's
# packages unpacked into /opt/duet-vm-tools (with nfs4-acl-tools for
# tests/vmclient/acl.sh), never installed here (their
# services would take port 111, which duetd's portmapper tests need).
VM_TOOLS=/opt/duet-vm-tools
if [ ! -x $VM_TOOLS/sbin/rpc.statd ] || [ ! -x $VM_TOOLS/sbin/rpcbind ] || [ ! -e $VM_TOOLS/usr/lib/x86_64-linux-gnu/libwrap.so.0 ] || [ ! -x $VM_TOOLS/usr/bin/nfs4_setfacl ]; then
  echo "install-deps: unpacking rpcbind, nfs-common, libwrap0 and nfs4-acl-tools into $VM_TOOLS"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  debs=$(mktemp -d)
  (cd "$debs" && chmod 777 . && $SUDO apt-get download -qq rpcbind nfs-common libwrap0 nfs4-acl-tools 2>/dev/null) \
    || { $SUDO apt-get update -qq && (cd "$debs" && $SUDO apt-get download -qq rpcbind nfs-common libwrap0 nfs4-acl-tools); }
  $SUDO mkdir -p $VM_TOOLS
  for d in "$debs"/*.deb; do $SUDO dpkg-deb -x "$d" $VM_TOOLS; done
  rm -rf "$debs"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "install-deps: cargo is missing: install a Rust toolchain (rustup) first" >&2
  exit 1
fi
