#!/usr/bin/env bash
# Renders a small calibration set for each sample model into .cache/samples/ and writes a project
# file that opens the model with its data already chosen (scripts/run.sh opens det's):
#   det: 8 text pages 640x640 (ImageNet mean/std), rec: 16 text lines 320x48, cls: 16 text lines
#   192x48, half of them upside down (PaddleOCR's (x - 0.5) / 0.5).
# The images are made by the project's own renderer (tests/support/text_images.cpp, seeded),
# built as qs_make_text_images. Usage: make_samples.sh BUILD_DIR. Quick when already there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
samples="$root/.cache/samples"
models="$root/.cache/models"
render="$build/tests/qs_make_text_images"
mkdir -p "$samples"

# name, model file, count, width, height, seed, rotate-half, mean, std
make() {
  local name=$1 model=$2 count=$3 w=$4 h=$5 seed=$6 flip=$7 mean=$8 std=$9
  if [ ! -f "$samples/$name/.done" ]; then
    rm -rf "$samples/$name"
    "$render" "$samples/$name" "$count" "$w" "$h" "$seed" ${flip:+--flip-half} >/dev/null
    touch "$samples/$name/.done"
  fi
  cat > "$samples/$name.qsproj" <<JSON
{
  "quantscope_project": 1,
  "model": "$models/$model",
  "calibration": {"data": "$samples/$name", "samples": -1, "width": $w, "height": $h, "scale": 0.00392156862745098,
                  "mean": [$mean], "std": [$std], "bgr": false, "nhwc": false,
                  "method": "max", "percentile": 99.99, "mode": "int8"},
  "calibrated": false,
  "excluded_nodes": [], "quantized_nodes": [],
  "view": {"colouring": "graphwise", "threshold_db": 20}
}
JSON
}
make det ch_PP-OCRv4_det_infer.onnx 8 640 640 21 "" "0.485, 0.456, 0.406" "0.229, 0.224, 0.225"
make rec ch_PP-OCRv4_rec_infer.onnx 16 320 48 22 "" "0.5, 0.5, 0.5" "0.5, 0.5, 0.5"
make cls ch_ppocr_mobile_v2.0_cls_infer.onnx 16 192 48 23 1 "0.5, 0.5, 0.5" "0.5, 0.5, 0.5"
echo "samples: ready ($samples)"
