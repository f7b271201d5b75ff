#!/usr/bin/env bash
# Sets up what is missing, builds, and opens the workbench on the sample model (PP-OCRv4 det).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# ccache hits across checkouts (paths relative to the repository root).
export CCACHE_BASEDIR="$root"
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DQS_BUILD_GUI=ON >/dev/null
cmake --build build -j"${QS_JOBS:-2}" --target quantscope
exec build/app/quantscope "${1:-$root/.cache/models/ch_PP-OCRv4_det_infer.onnx}"
