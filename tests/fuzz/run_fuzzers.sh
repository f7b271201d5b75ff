#!/usr/bin/env bash
# Runs every libFuzzer target of a -DQS_FUZZ=ON build for a bounded time and fails on any crash,
# leak, timeout or out-of-memory.
#   tests/fuzz/run_fuzzers.sh BUILD_DIR [SECONDS]     (default 60 s per target)
# Seeds come from BUILD_DIR/tests/fuzz/qs_fuzz_seeds (models from .cache/models when present);
# the corpora grow in BUILD_DIR/fuzz-corpus/<target>; crash inputs land in
# BUILD_DIR/fuzz-artifacts/<target>/. Prints per target: executions, exec/s, cov, ft, corpus.
# QS_FUZZ_TARGETS="fuzz_npy fuzz_image" runs a subset; QS_FUZZ_PARALLEL (default 2) targets run at once.
# QS_FUZZ_SEED (default 1) is libFuzzer's -seed: with the same binary and seeds a run explores the
# same inputs, so a CI result can be reproduced; set another value (or 0, random) to explore more.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?usage: run_fuzzers.sh BUILD_DIR [SECONDS]}
seconds=${2:-60}
fuzz_seed=${QS_FUZZ_SEED:-1}
build=$(cd "$build" && pwd)
bin="$build/tests/fuzz"
targets=${QS_FUZZ_TARGETS:-"fuzz_model fuzz_npy fuzz_quant_files fuzz_image fuzz_project"}

# -max_len per target: big enough for the seeds, small enough to keep exec/s high.
max_len() {
  case "$1" in
    fuzz_model) echo 131072 ;;
    fuzz_npy) echo 16384 ;;
    fuzz_quant_files) echo 16384 ;;
    fuzz_image) echo 32768 ;;
    fuzz_project) echo 8192 ;;
    *) echo 4096 ;;
  esac
}
seed_dir() {
  case "$1" in
    fuzz_model) echo model ;;
    fuzz_npy) echo npy ;;
    fuzz_quant_files) echo quant_files ;;
    fuzz_image) echo image ;;
    fuzz_project) echo project ;;
  esac
}

seeds="$build/fuzz-seeds"
rm -rf "$seeds"
"$bin/qs_fuzz_seeds" "$seeds" "$root/.cache/models" >/dev/null || { echo "run_fuzzers: seed generation failed"; exit 1; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One target: runs it and writes its table row (and error excerpt) to $build/fuzz-$t.row; the
# return code says whether it passed.
run_one() {
  local t=$1 exe="$bin/$1" corpus="$build/fuzz-corpus/$1" artifacts="$build/fuzz-artifacts/$1"
  local log="$build/fuzz-$1.log" row="$build/fuzz-$1.row"
  [ -x "$exe" ] || { echo "run_fuzzers: $exe missing" >"$row"; return 1; }
  mkdir -p "$corpus" "$artifacts"
  local start rc secs last execs eps cov ft corp result
  start=$(date +%s)
  "$exe" "$corpus" "$seeds/$(seed_dir "$t")" -max_total_time="$seconds" -max_len="$(max_len "$t")" \
    -rss_limit_mb=2048 -timeout=10 -seed="$fuzz_seed" -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  # The last status line ("#N DONE cov: C ft: F corp: K/..b ... exec/s: E") and the final stats.
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
  eps=$(grep -E '^stat::average_exec_per_sec' "$log" | awk '{print $2}')
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
  corp=$(sed -nE 's/.* corp: ([0-9]+)\/.*/\1/p' <<<"$last")
  result=ok
  if [ $rc -ne 0 ] || grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|==ERROR|SUMMARY: ' "$log"; then
    result="FAILED (rc $rc; log $log; inputs in $artifacts)"
  fi
  printf '%-18s %10s %8s %7s %7s %8s %6s  %s\n' "$t" "${execs:-?}" "${eps:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" \
    "$secs" "$result" >"$row"
  if [ "$result" != ok ]; then
    grep -E 'ERROR|runtime error|SUMMARY|^    #[0-9] ' "$log" | head -20 | sed 's/^/    /' >>"$row"
    return 1
  fi
}

# QS_FUZZ_PARALLEL targets at a time (default 2, the CI's cores), each for SECONDS.
parallel=${QS_FUZZ_PARALLEL:-2}
status=0
pids=()
for t in $targets; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  run_one "$t" &
  pids+=("$!")
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
printf '%-18s %10s %8s %7s %7s %8s %6s  %s\n' target executions exec/s cov ft corpus secs result
for t in $targets; do cat "$build/fuzz-$t.row"; done
exit $status
