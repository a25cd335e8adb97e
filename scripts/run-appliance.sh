#!/usr/bin/env bash
# Sets up and runs a single-node duet appliance on the embedded defaults:
# data under ./duet-data (or $DUET_DATA_DIR), the share `public` over SMB
# and NFS, the admin API on 127.0.0.1:7445. The admin password is printed
# on first start. Stop it with Ctrl-C (SIGINT) or SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cargo fetch --locked
cargo build --locked --release -p duet-appliance -p duet-ctl
data="${DUET_DATA_DIR:-$PWD/duet-data}"
echo "run-appliance: data in $data; try: target/release/duetctl --data-dir $data status"
exec target/release/duetd --data-dir "$data" "$@"
