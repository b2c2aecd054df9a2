#!/usr/bin/env bash
# The zabd bench matrix of docs/server.md: 3 nodes, memory storage, 1 KiB,
# 1x1, 8x16, 8x256, each REPS times, for TARGET (spread|leader). One line per
# run; every run is bounded (10 s window + 2 s warm-up, 120 s timeout) and
# stops the cluster it started. Usage: bench/server_matrix.sh [REPS] [TARGET]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-2}
target=${2:-spread}
for rep in $(seq 1 "$reps"); do
  for cw in "1 1" "8 16" "8 256"; do
    set -- $cw
    timeout 120 python3 -m zabd bench --spawn 3 --storage memory --clients "$1" --window "$2" \
        --payload 1024 --duration 10 --target "$target" --json --no-progress |
      python3 -c "
import json, sys
d = json.load(sys.stdin)
servers = [v for k, v in d['cpu_pct'].items() if k != 'client']
print(f\"rep $rep $1x$2 $target: {d['ops_per_s']:.0f} ops/s p50 {d['p50_ms']} p99 {d['p99_ms']} p99.9 {d['p999_ms']} ms\",
      f\"errors {d['errors']} server cpu {servers} client cpu {d['cpu_pct']['client']} other cpu {d['other_cpu_pct']}\")
"
  done
done
