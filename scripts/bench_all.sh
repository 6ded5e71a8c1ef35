#!/usr/bin/env bash
# Every benchmark, under both allocators, at 1 and 2 threads; JSON into $1 (default perf/), then the
# performance table of docs/performance.md (scripts/perf_table.py).  Run it on a quiet machine: each table says how much CPU
# other processes took while it was measured, and marks itself LOADED above 0.25 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-perf}
mkdir -p "$out"
export TORCH_DEVICE_BACKEND_AUTOLOAD=0 HF_HUB_OFFLINE=1
for alloc in caching plain; do
  for bench in bench_gdn bench_gdn_decode bench_gdn_verify bench_short_conv bench_packed_attention bench_hook_overhead; do
    echo "== $bench --allocator $alloc"
    .venv/bin/python "benchmarks/$bench.py" --allocator "$alloc" --json "$out/$bench-$alloc.json" \
      > "$out/$bench-$alloc.txt" 2>&1 || true      # a missed goal exits 1; the table says which
    grep -E "^   (MEETS|BELOW) " "$out/$bench-$alloc.txt" || tail -5 "$out/$bench-$alloc.txt"
  done
done
.venv/bin/python scripts/perf_table.py "$out"/*-caching.json "$out"/*-plain.json > "$out/table.md"
echo "table: $out/table.md"
