#!/usr/bin/env bash
# Sets up what is missing, builds and runs every test: the full build (GUI included) and an
# AddressSanitizer + UndefinedBehaviorSanitizer build of the core, CLI and tests (GUI off, which
# also proves the core builds without Qt), then the libFuzzer targets for a bounded time. Used by .ci/run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# ccache hits across checkouts (paths relative to the repository root).
export CCACHE_BASEDIR="$root"
export ORT_DISABLE_TELEMETRY=1
jobs=${QS_JOBS:-2}

scripts/setup.sh

echo "== build: release, GUI on"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DQS_BUILD_GUI=ON >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== build: AddressSanitizer + UBSan, GUI off"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQS_SANITIZE=ON -DQS_BUILD_GUI=OFF \
  -DQS_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"

echo "== fuzz: libFuzzer targets (clang, ASan+UBSan), seeds and regressions, then ${QS_FUZZ_SECONDS:-60} s each"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQS_FUZZ=ON \
  -DQS_BUILD_GUI=OFF -DQS_BUILD_BENCH=OFF -DQS_BUILD_TESTS=OFF >/dev/null
cmake --build build-fuzz -j"$jobs" --target fuzz_model fuzz_npy fuzz_quant_files fuzz_image fuzz_project qs_fuzz_seeds \
  qs_fuzz_regressions
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-fuzz/tests/fuzz --output-on-failure
tests/fuzz/run_fuzzers.sh build-fuzz "${QS_FUZZ_SECONDS:-60}"
echo "== all tests passed"
