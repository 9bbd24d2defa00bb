#!/usr/bin/env bash
# The floor beside `guestlist-bench steps`: the statements of a fresh three-step message sent by
# pgbench (prepared, 10 s at 1 and 16 clients), with the whole machine's CPU per message read
# from /proc/stat, as the bench reads it. Usage: scripts/pgbench-steps.sh [DATABASE_URL]
set -euo pipefail
cd "$(dirname "$0")/.."
url="${1:-postgres://postgres@127.0.0.1:5432/test}"
dir=crates/guestlist-bench/pgbench
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
psql -q -v ON_ERROR_STOP=1 "$url" -f "$dir/steps3-tables.sql" 2>/dev/null
for clients in 1 16; do
    before=$(busy)
    tps=$(pgbench -n -M prepared -c "$clients" -j 2 -T 10 -f "$dir/steps3.sql" "$url" 2>/dev/null |
        awk '/^tps/{print $3}')
    after=$(busy)
    awk -v c="$clients" -v tps="$tps" -v j=$((after - before)) -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "pgbench steps3, %2d clients: %6.0f msgs/s, %5.0f CPU µs/msg\n", c, tps, j / hz * 1e6 / (tps * 10) }'
done
