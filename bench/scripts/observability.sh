#!/usr/bin/env bash
# The per-call cost of the observability features (issue 12), in instructions counted by
# callgrind over whole runs of N and 2N calls, subtracted: `Policy::none()` and the full policy of W1 (success path), built with each feature
# set. Nothing listens (no subscriber, no recorder): this is rampart's own share. Markdown on
# stdout. Run from anywhere; honours CARGO_TARGET_DIR.
#
#   bench/scripts/observability.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

target="${CARGO_TARGET_DIR:-target}"
calls="${CALLS:-20000}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
profile="$target/release/examples/profile"

refs() { # contender calls -> instructions of the whole run
    # Not `--toggle-collect`: in some builds `measured` tail-calls into the runtime, and the
    # toggle then sees it return before the calls run. What a run does besides the calls is
    # the same for N and 2N calls, so it cancels in the difference.
    valgrind --tool=callgrind --callgrind-out-file="$out/cg" "$profile" w1_success "$1" "$2" 2>&1 |
        sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
}

echo "| features | Policy::none() | full policy |"
echo "|---|---:|---:|"
for features in off tracing metrics tracing,metrics; do
    flags=()
    [[ $features != off ]] && flags=(--features "$features")
    cargo build --release -q -p rampart-bench --example profile "${flags[@]}"
    row="| $features |"
    for c in rampart-none rampart; do
        one=$(refs "$c" "$calls")
        two=$(refs "$c" $((2 * calls)))
        row="$row $(( (two - one) / calls )) |"
    done
    echo "$row"
done
