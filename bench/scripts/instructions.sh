#!/usr/bin/env bash
# Instructions per call of each W1 contender (the success path), counted by callgrind, beside
# the hand-written floor doing the same work: repeatable where times are not. Markdown on
# stdout. Run from anywhere; honours CARGO_TARGET_DIR.
#
#   bench/scripts/instructions.sh                  # the contenders below
#   bench/scripts/instructions.sh floor2 rampart   # only these
#
# Each contender runs under `valgrind --tool=callgrind` through `examples/profile.rs`; two
# whole runs (N and 2N calls) are subtracted, so what is fixed per run (start-up, the warm-up,
# the runtime's first poll) cancels out: (refs(2N) - refs(N)) / N.
set -euo pipefail
cd "$(dirname "$0")/../.."

target="${CARGO_TARGET_DIR:-target}"
calls="${CALLS:-20000}"
workload=w1_success
contenders=("$@")
if [[ ${#contenders[@]} -eq 0 ]]; then
    contenders=(direct rampart-none floor rampart-retry-only floor2 rampart rampart-default-breaker tower seatbelt)
fi

cargo build --release -q -p rampart-bench --example profile
profile="$target/release/examples/profile"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

refs() { # contender calls -> instructions of the whole run
    # Not `--toggle-collect`: where `measured` tail-calls into the runtime, the toggle sees it
    # return before the calls run. The rest of a run is the same for N and 2N calls.
    valgrind --tool=callgrind --callgrind-out-file="$out/cg" "$profile" "$workload" "$1" "$2" 2>&1 |
        sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
}

declare -A per_call
echo "| contender | instructions per call | vs its floor |"
echo "|---|---:|---:|"
for c in "${contenders[@]}"; do
    one=$(refs "$c" "$calls")
    two=$(refs "$c" $((2 * calls)))
    per_call[$c]=$(( (two - one) / calls ))
    floor=$("$profile" --floor-of "$workload" "$c")
    ratio="–"
    if [[ -n "$floor" && -n "${per_call[$floor]:-}" ]]; then
        ratio=$(awk -v a="${per_call[$c]}" -v b="${per_call[$floor]}" -v f="$floor" \
            'BEGIN { printf "%.2fx %s", a / b, f }')
    fi
    echo "| $c | ${per_call[$c]} | $ratio |"
done
