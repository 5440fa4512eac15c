#!/usr/bin/env bash
# Soak: tens of thousands of multi-host seeds across shapes, in the background of a working
# day. Prints a progress line per batch, seeds per CPU-second and simulated hours per
# CPU-hour per shape, and a replay command for every failure (fleet-sim prints them).
#
# Usage: scripts/soak.sh [SEEDS_PER_SHAPE] [SHAPES] [JOBS]
#   SEEDS_PER_SHAPE  default 5000
#   SHAPES           default 3x2,4x5,3x10,6x10 (HOSTSxMEMBERS, comma-separated)
#   JOBS             default: the number of cores
#   START=N          first seed (default 0): a soak split over several sittings runs
#                    START=0 then START=<the first part's end>, on the same commit
#   BATCH=N          seeds per fleet-sim run (default 500)
#   SIM=path         a fleet-sim binary to run instead of building this checkout's (a copy
#                    keeps a long soak on one build while the tree moves on)
# Logs go to target/soak/<shape>.<START>.log; the script exits 1 if any seed failed.
set -euo pipefail
cd "$(dirname "$0")/.."

SEEDS=${1:-5000}
SHAPES=${2:-3x2,4x5,3x10,6x10}
JOBS=${3:-$(nproc)}
BATCH=${BATCH:-500}
FIRST=${START:-0}
OUT=target/soak
mkdir -p "$OUT"

if [ -z "${SIM:-}" ]; then
  cargo build --release --locked -p fleet-sim
  SIM=./target/release/fleet-sim
fi
failed=0
IFS=',' read -ra shapes <<< "$SHAPES"
for shape in "${shapes[@]}"; do
  log="$OUT/$shape.$FIRST.log"
  : > "$log"
  cpu_start=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
  start=$FIRST
  last=$(( FIRST + SEEDS ))
  while [ "$start" -lt "$last" ]; do
    end=$(( start + BATCH < last ? start + BATCH : last ))
    if ! "$SIM" run --shapes "$shape" --seeds "$start..$end" --jobs "$JOBS" >> "$log" 2>&1; then
      failed=1
    fi
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    echo "soak $shape: seeds $start..$end done — $line"
    start=$end
  done
  ticks=$(getconf CLK_TCK)
  cpu_end=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
  cpu_s=$(awk -v a="$cpu_start" -v b="$cpu_end" -v t="$ticks" 'BEGIN { printf "%.1f", (b - a) / t }')
  # "seeds N   sends M   wall Ws   sim-time speed-up Xx": simulated seconds = wall x speed-up.
  sim_s=$(grep -E 'sim-time speed-up' "$log" | sed -E 's/.*wall ([0-9.]+)s.*speed-up ([0-9.]+)x.*/\1 \2/' \
    | awk '{ s += $1 * $2 } END { printf "%.0f", s }')
  passed=$(grep -E '^[0-9]+ passed' "$log" | awk '{ p += $1; f += $3 } END { printf "%d passed, %d failed", p, f }')
  rate=$(awk -v n="$SEEDS" -v c="$cpu_s" 'BEGIN { printf "%.2f", (c > 0 ? n / c : 0) }')
  simh=$(awk -v s="$sim_s" -v c="$cpu_s" 'BEGIN { printf "%.0f", (c > 0 ? s / c : 0) }')
  echo "soak $shape: seeds $FIRST..$last with $SIM, $SEEDS seeds, $passed, $cpu_s CPU-s: $rate seeds per CPU-second, $simh simulated hours per CPU-hour"
  grep -E '^  replay:' "$log" | sort -u | sed "s/^/soak $shape failure: /" || true
done
exit "$failed"
