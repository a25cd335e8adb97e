#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 60), one at a time,
# one process each, and prints one result line per target:
#   <target>: ok|CRASH, <runs> runs in <s> s (<exec/s> exec/s), corpus <n>
# New corpus entries land in fuzz/corpus/<target>/ (minimize with
# `cargo +nightly fuzz cmin -s none -a <target>` before committing), crashes
# in fuzz/artifacts/<target>/. Exit status 1 if any target crashed.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(smb2_decode ntlmssp_spnego rpc_xdr smb2_conn nfs4_session dcerpc nfs4_callback acl_decode)
fi
if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz
fi
# No sanitizer: the protocol crates have no unsafe code, and without ASan
# the targets run several times faster. Debug assertions and overflow
# checks stay on (-a): an overflow on hostile input is a finding.
flags=(-s none -a)
cargo +nightly fuzz build "${flags[@]}" >/dev/null 2>&1 || cargo +nightly fuzz build "${flags[@]}" || exit 2
mkdir -p fuzz/target/logs
status=0
for t in "${targets[@]}"; do
    log=fuzz/target/logs/$t.log
    mkdir -p "fuzz/corpus/$t"
    cargo +nightly fuzz run "${flags[@]}" "$t" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1
    rc=$?
    runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0)
    rate=$(grep -Eo 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0)
    took=$(grep -Eo '^Done [0-9]+ runs in [0-9]+ second' "$log" | grep -Eo '[0-9]+ second' | grep -Eo '[0-9]+' || echo "$secs")
    n=$(find "fuzz/corpus/$t" -type f | wc -l)
    if [ $rc -eq 0 ]; then
        echo "$t: ok, ${runs:-0} runs in ${took} s (${rate:-0} exec/s), corpus $n"
    else
        status=1
        art=$(grep -Eo 'Test unit written to [^ ]+' "$log" | tail -1 | awk '{print $NF}')
        echo "$t: CRASH (exit $rc) after ${runs:-?} runs: ${art:-see $log}"
    fi
done
exit $status
