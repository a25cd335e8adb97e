#!/usr/bin/env bash
# Sets up and runs duet's whole test suite. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
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
echo "summary: $passed passed, $failed failed"
exit "$status"
