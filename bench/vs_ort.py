#!/usr/bin/python3
"""Side-by-side speed of `quantscope run` and ONNX Runtime (onnxruntime-node) on the PaddleOCR
models, same inputs, same thread count, alternating rounds in one run.

usage: bench/vs_ort.py [--build build] [--threads 2] [--runs 10] [--rounds 3] [--markdown]
Each round runs each engine once as a process: one warm-up run, then --runs timed runs
(the engines time their own runs, so process start and model load are excluded). The figure
is the median over all timed runs of all rounds."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, ".cache", "models")
CASES = [
    ("det", "ch_PP-OCRv4_det_infer.onnx", (1, 3, 640, 640)),
    ("rec", "ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
    ("cls", "ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)),
]


def timed_runs(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=dict(os.environ, ORT_DISABLE_TELEMETRY="1"))
    line = [l for l in out.stdout.splitlines() if l.startswith("{")][-1]
    return json.loads(line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, nargs="*", default=[1])
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    qs = os.path.join(args.build, "app", "quantscope")
    ort = os.path.join(ROOT, "tests", "support", "ort_run.mjs")
    rng = np.random.default_rng(7)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, file, shape in CASES:
            for batch in args.batch:
                shp = (batch,) + shape[1:]
                x = rng.uniform(-1, 1, size=shp).astype(np.float32)
                np.save(os.path.join(tmp, "in_0.npy"), x)
                np.savez(os.path.join(tmp, "in.npz"), x=x)
                model = os.path.join(MODELS, file)
                ours, theirs = [], []
                for _ in range(args.rounds):
                    # --repeat gives one untimed warm-up (the first run) then R timed runs.
                    r = timed_runs([qs, "run", model, "--input", os.path.join(tmp, "in.npz"), "--threads",
                                    str(args.threads), "--repeat", str(args.runs)])
                    ours.append(r["ms_median"])
                    r = timed_runs(["node", ort, model, tmp, "", "--threads", str(args.threads), "--repeat", str(args.runs)])
                    theirs.append(r["ms_median"])
                q, o = statistics.median(ours), statistics.median(theirs)
                rows.append((f"{name} {'x'.join(map(str, shp))}", q, o, q / o))
                print(f"{rows[-1][0]:28s} quantscope {q:8.2f} ms   onnxruntime {o:8.2f} ms   ratio {q / o:5.2f}x",
                      file=sys.stderr)
    if args.markdown:
        print("| case | quantscope ms (median) | ONNX Runtime ms (median) | ratio |")
        print("|---|---:|---:|---:|")
        for case, q, o, r in rows:
            print(f"| {case} | {q:.2f} | {o:.2f} | {r:.2f}x |")


if __name__ == "__main__":
    main()
