#!/usr/bin/env bash
# Real fuzzing of fleetd's targets with cargo-fuzz (libFuzzer; needs a nightly toolchain and
# `cargo install cargo-fuzz`). Each target runs for SECS seconds (default 600), starting from
# the committed seeds in fuzz/corpus/<target>/; what it grows goes to fuzz/work/<target>/
# (not committed). A crash is written to fuzz/artifacts/<target>/ — fix it, then copy the
# input into fuzz/corpus/<target>/ so the stable replay test (`cargo test -p fleet-fuzz`, run
# by .ci/run) keeps it fixed.
#
#   scripts/fuzz.sh                 # every target, 600 s each, one after another
#   scripts/fuzz.sh envelope 60     # one target, 60 s
#   JOBS=2 scripts/fuzz.sh          # two targets at a time
set -euo pipefail
cd "$(dirname "$0")/.."
TARGETS=(envelope amqp_headers herdr faces config gateway pane_text terminal report)
if [ $# -ge 1 ] && [ "$1" != all ]; then TARGETS=("$1"); fi
SECS=${2:-600}
JOBS=${JOBS:-1}
TOOLCHAIN=${TOOLCHAIN:-nightly}

for t in "${TARGETS[@]}"; do
  cargo +"$TOOLCHAIN" fuzz build --fuzz-dir fuzz --features libfuzzer -O "$t"
done

run() {
  local t=$1 log=fuzz/logs/$1.log
  mkdir -p fuzz/logs "fuzz/work/$t" "fuzz/artifacts/$t"
  echo "== $t: ${SECS}s (log: $log)"
  if cargo +"$TOOLCHAIN" fuzz run --fuzz-dir fuzz --features libfuzzer -O "$t" "fuzz/work/$t" "fuzz/corpus/$t" -- \
       -max_total_time="$SECS" -max_len=65536 -rss_limit_mb=2048 \
       -artifact_prefix="fuzz/artifacts/$t/" > "$log" 2>&1; then
    echo "   $t: $(grep -E '^Done [0-9]+ runs' "$log" | tail -1) — no crash"
  else
    echo "   $t: FAILED — see $log and fuzz/artifacts/$t/"; return 1
  fi
}

status=0
if [ "$JOBS" -gt 1 ]; then
  pids=()
  for t in "${TARGETS[@]}"; do
    run "$t" & pids+=($!)
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
else
  for t in "${TARGETS[@]}"; do run "$t" || status=1; done
fi
exit $status
