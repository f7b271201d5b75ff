#!/usr/bin/python3
"""What INT8 buys in ONNX Runtime on this CPU: ONNX Runtime's time on the FP32 PaddleOCR models
against the quantized.onnx that `quantscope export` writes for them (rendered text images as
calibration data), same inputs, same thread count, alternating rounds in one run.

usage: bench/int8_vs_fp32.py [--build build] [--threads 2] [--runs 10] [--rounds 3]
                             [--levels all,basic] [--markdown]
Each round runs each model once as a node process (tests/support/ort_batch.mjs): one warm-up run,
then --runs timed runs (ORT times its own runs; process start and session creation are
excluded). The figure is the median over all timed runs of all rounds. --levels lists ORT's
graphOptimizationLevel values to time the quantized model at ('all' is what users get)."""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, ".cache", "models")
RUNNER = os.path.join(ROOT, "tests", "support", "ort_batch.mjs")
# name, file, W, H, mean, std
CASES = [
    ("det", "ch_PP-OCRv4_det_infer.onnx", 640, 640, "0.485,0.456,0.406", "0.229,0.224,0.225"),
    ("cls", "ch_ppocr_mobile_v2.0_cls_infer.onnx", 192, 48, "0.5,0.5,0.5", "0.5,0.5,0.5"),
]


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True,
                          env=dict(os.environ, ORT_DISABLE_TELEMETRY="1"), **kw)


def timed(model, in_dir, threads, runs, level):
    out = run(["node", RUNNER, model, in_dir, "-", "--samples", "1", "--threads", str(threads),
               "--repeat", str(runs + 1), "--level", level])
    return json.loads([l for l in out.stdout.splitlines() if l.startswith("{")][-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=4, help="calibration images per model")
    ap.add_argument("--levels", default="all,basic")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    qs = os.path.join(args.build, "app", "quantscope")
    make_images = os.path.join(args.build, "tests", "qs_make_text_images")
    levels = args.levels.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, file, w, h, mean, std in CASES:
            model = os.path.join(MODELS, file)
            images = os.path.join(tmp, name + "_images")
            run([make_images, images, str(args.samples), str(w), str(h), "11"])
            out_dir = os.path.join(tmp, name + "_export")
            run([qs, "export", model, "--calibration-data", images, "--image-size", f"{w}x{h}", "--mean", mean,
                 "--std", std, "--calibration-method", "entropy", "--no-sensitivity", "--no-layerwise",
                 "--threads", str(args.threads), "--output-dir", out_dir])
            with open(os.path.join(out_dir, "report.json")) as f:
                predicted = json.load(f)["outputs"][0]["snr_db"]
            in_dir = os.path.join(tmp, name + "_in")
            os.makedirs(in_dir)
            rng = np.random.default_rng(0)
            np.save(os.path.join(in_dir, "in_0_0.npy"), rng.uniform(-1, 1, (1, 3, h, w)).astype(np.float32))
            fp32, int8 = [], {lv: [] for lv in levels}
            for _ in range(args.rounds):
                fp32.append(timed(model, in_dir, args.threads, args.runs, "all")["ms_median"])
                for lv in levels:
                    int8[lv].append(timed(os.path.join(out_dir, "quantized.onnx"), in_dir, args.threads, args.runs, lv)["ms_median"])
            f = statistics.median(fp32)
            row = {"model": name, "size": f"{w}x{h}", "fp32_ms": f, "predicted_snr_db": predicted}
            for lv in levels:
                row[f"int8_{lv}_ms"] = statistics.median(int8[lv])
                row[f"int8_{lv}_speedup"] = f / row[f"int8_{lv}_ms"]
            rows.append(row)
    if args.markdown:
        head = "| model | input | FP32 (ms) | " + " | ".join(f"quantized.onnx, ORT '{lv}' (ms)" for lv in levels) + " |"
        print(head)
        print("|" + "---|" * (3 + len(levels)))
        for r in rows:
            cells = " | ".join(f"{r[f'int8_{lv}_ms']:.1f} (x{r[f'int8_{lv}_speedup']:.2f})" for lv in levels)
            print(f"| {r['model']} | {r['size']} | {r['fp32_ms']:.1f} | {cells} |")
    else:
        for r in rows:
            print(json.dumps(r))


if __name__ == "__main__":
    main()
