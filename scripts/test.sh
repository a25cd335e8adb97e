#!/usr/bin/env bash
# Sets up and runs duet's whole test suite. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
./scripts/install-deps.sh
# Every crate Cargo.lock names, downloaded before anything runs offline
# (a test runs `cargo metadata --offline`); fails if the lock is stale.
cargo fetch --locked
ulimit -l unlimited 2>/dev/null || true
# One build of everything (RocksDB is compiled once), then every test.
cargo test --workspace --no-run
set +e
cargo test --workspace --no-fail-fast 2>&1 | tee target/test-output.txt
status=${PIPESTATUS[0]}
set -e
# One closing line for the whole run.
passed=$(grep -Eo '[0-9]+ passed' target/test-output.txt | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' target/test-output.txt | awk '{s+=$1} END {print s+0}')
echo "test.sh: $(( $(date +%s) - start )) s (CARGO_HOME=${CARGO_HOME:-~/.cargo})"
echo "summary: $passed passed, $failed failed"
exit "$status"
