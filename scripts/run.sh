#!/usr/bin/env bash
# Sets up what is missing, builds, and opens the workbench on the sample model (PP-OCRv4 det) with
# its sample calibration data chosen (scripts/make_samples.sh): one click on Calibrate gives the coloured graph.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# ccache hits across checkouts (paths relative to the repository root).
export CCACHE_BASEDIR="$root"
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DQS_BUILD_GUI=ON >/dev/null
cmake --build build -j"${QS_JOBS:-2}" --target quantscope qs_make_text_images
# Sample calibration data for the sample models and a project that opens det with it chosen.
scripts/make_samples.sh build
exec build/app/quantscope "${1:-$root/.cache/samples/det.qsproj}"
