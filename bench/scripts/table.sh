#!/usr/bin/env bash
# Runs the peer benchmarks and the allocation harness, then prints the table of BENCHMARKS.md
# (Markdown, with the goals checked) on stdout. Run from anywhere; honours CARGO_TARGET_DIR.
#
#   bench/scripts/table.sh                 # measure, then print the table
#   bench/scripts/table.sh --table-only    # print the table from the last measurements
#
# Extra arguments go to criterion (default: --warm-up-time 1 --measurement-time 2).
set -euo pipefail
cd "$(dirname "$0")/../.."

target="${CARGO_TARGET_DIR:-target}"
allocations="$target/peer-allocations.tsv"

if [[ "${1:-}" != "--table-only" ]]; then
    criterion_args=("$@")
    if [[ ${#criterion_args[@]} -eq 0 ]]; then
        criterion_args=(--warm-up-time 1 --measurement-time 2)
    fi
    echo "== load before: $(uptime)" >&2
    cargo bench -p rampart-bench --bench peers -- "${criterion_args[@]}" >&2
    cargo run --release -p rampart-bench --example allocations > "$allocations"
    echo "== load after: $(uptime)" >&2
fi

cargo run --release -q -p rampart-bench --example table -- "$target/criterion" "$allocations"
