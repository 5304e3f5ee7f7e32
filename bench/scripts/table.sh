#!/usr/bin/env bash
# Runs the peer benchmarks and the allocation harness, then prints the table of BENCHMARKS.md
# (Markdown, each contender beside the hand-written floor doing the same work, with the goals
# checked) on stdout. Run from anywhere; honours CARGO_TARGET_DIR.
#
#   bench/scripts/table.sh                       # measure once, then print the table
#   bench/scripts/table.sh --runs 5              # measure 5 times: medians of the 5 medians
#   bench/scripts/table.sh --runs 5 w1_success   # only W1 (a criterion filter), 5 times
#   bench/scripts/table.sh --table-only          # print the table from the last measurements
#   bench/scripts/table.sh --table-only --runs 5 # ... from the last 5-run measurement
#
# Other arguments go to criterion (default: --warm-up-time 1 --measurement-time 2). With
# --runs N, run i is saved as criterion baseline `run<i>` (earlier `run*` baselines are removed
# first), and the load average before each run goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/../.."

target="${CARGO_TARGET_DIR:-target}"
allocations="$target/peer-allocations.tsv"

table_only=false
runs=0
criterion_args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --table-only) table_only=true ;;
        --runs) runs="$2"; shift ;;
        *) criterion_args+=("$1") ;;
    esac
    shift
done
if ! printf '%s\n' "${criterion_args[@]}" | grep -q -- '^--'; then
    criterion_args+=(--warm-up-time 1 --measurement-time 2)
fi

baselines=()
if [[ "$runs" -gt 0 ]]; then
    for i in $(seq 1 "$runs"); do baselines+=("run$i"); done
fi

if ! $table_only; then
    if [[ "$runs" -gt 0 ]]; then
        find "$target/criterion" -mindepth 3 -maxdepth 3 -type d -name 'run*' \
            -exec rm -rf {} + 2>/dev/null || true
        for baseline in "${baselines[@]}"; do
            echo "== $baseline, load before: $(uptime)" >&2
            cargo bench -p rampart-bench --bench peers -- "${criterion_args[@]}" \
                --save-baseline "$baseline" >&2
        done
    else
        echo "== load before: $(uptime)" >&2
        cargo bench -p rampart-bench --bench peers -- "${criterion_args[@]}" >&2
    fi
    cargo run --release -p rampart-bench --example allocations > "$allocations"
    echo "== load after: $(uptime)" >&2
fi

cargo run --release -q -p rampart-bench --example table -- \
    "$target/criterion" "$allocations" "${baselines[@]}"
