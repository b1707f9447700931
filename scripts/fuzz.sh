#!/usr/bin/env bash
# Builds every cargo-fuzz target of fuzz/ and runs each for a bounded time on
# the stable toolchain. Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] (default 20).
#
# Stable works because the targets are built with `--sanitizer none`: the
# coverage instrumentation libFuzzer needs is stable `-C` flags (sancov
# passes); only the sanitizers (-Zsanitizer) need nightly. Debug assertions
# are on (`-a`: integer overflow panics), optimized (`-O`).
#
# Each target starts from its committed seeds (fuzz/corpus/<target>/, read
# only: new inputs go to a scratch corpus) and runs -max_total_time seconds.
# A crash, panic, timeout (10 s per input) or out-of-memory (2 GiB) fails the
# script; the input is saved under fuzz/artifacts/<target>/ and printed (hex).
# Prints the number of executions per target (libFuzzer's
# stat::number_of_executed_units).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: cargo-fuzz is missing (cargo install cargo-fuzz --locked)" >&2
  exit 1
fi
TARGETS=$(cargo fuzz list --fuzz-dir fuzz)
cargo fuzz build --fuzz-dir fuzz -s none -O -a
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
BIN=${CARGO_TARGET_DIR:-fuzz/target}/$TRIPLE/release
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
failed=()
printf '%-20s %12s %8s\n' target executions seconds >"$SCRATCH/summary"
for t in $TARGETS; do
  mkdir -p "$SCRATCH/$t" "fuzz/artifacts/$t"
  log=$SCRATCH/$t.log
  # New inputs go to the scratch corpus (first directory); the committed
  # seeds are only read.
  if "$BIN/$t" "$SCRATCH/$t" "fuzz/corpus/$t" -max_total_time="$SECS" \
      -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="fuzz/artifacts/$t/" >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed+=("$t")
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  printf '%-20s %12s %8s %s\n' "$t" "${execs:-?}" "$SECS" "$status" >>"$SCRATCH/summary"
  if [ "$status" = FAILED ]; then
    echo "=== $t failed; its log:" >&2
    tail -60 "$log" >&2 || true
    for a in $(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log"); do
      echo "=== crash input $a ($(wc -c <"$a") bytes; first 640 shown; rerun: $BIN/$t $a):" >&2
      od -A d -t x1 -N 640 "$a" >&2 || true
    done
  fi
done
cat "$SCRATCH/summary"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: failed: ${failed[*]}" >&2
  exit 1
fi
