#!/usr/bin/env python3
"""ONNX Runtime's own realisations of the rounding noise beside ours, paired (docs/quality.md, "ONNX Runtime's
own realisations").

Our analysis's output SNR is one realisation of which values land on either side of a rounding tie;
`--realisations N` measures N of them with every activation scale x (1 + D n) (QuantSession::realisationSnrDb),
and `quantscope export --scale-dither K` writes quantized.onnx with exactly realisation K's scales. This
script runs one export (the exported point as `quantscope export` chooses it, fallback included):

1. `quantscope export MODEL ... --scale-dither-files K --output-dir DIR EXPORT_ARGS`: quantized.onnx
   (realisation 0), quantized.dither<k>.onnx for k = 1..K and dither_realisations.json (our output SNR in
   realisations 0..K at the exported point, drawn by the same function),
2. ONNX Runtime (tests/support/ort_batch.mjs, no graph optimisations, Q/DQ kept, as
   scripts/fallback_ort_check.py) on the float model and each of the K + 1 files, on the same inputs,

and prints per realisation ours, ORT's and ORT - ours, then over k = 1..K: our mean and sd, ORT's mean
and sd, the paired difference's mean, sd and standard error (sd / sqrt(K)), their ratio (t), and the correlation
of ours and ORT's over k (how much of ORT's realisation the shared scales decide). A
systematic ORT part shows as |t| well above 2-3; noise as |t| below 2.

usage: ort_realisations.py MODEL INPUTS.npy [--realisations 8] [--samples 8]
                           [--dither 1e-6] [--quantscope BIN] [--export-args "..."] [--json OUT] [--keep DIR]
Needs /usr/bin/python3 with numpy and node with .cache/ort.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

import numpy as np

from fallback_ort_check import run_ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def snr_db(ref, q):
    ref, q = ref.astype(np.float64), q.astype(np.float64)
    return float(10 * np.log10((ref**2).sum() / max(((ref - q) ** 2).sum(), 1e-300)))


def quantscope(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd[:3])}: failed: {p.stderr.strip().splitlines()[-1:]}")
    return p


def stats(v):
    v = np.array(v, np.float64)
    sd = float(v.std(ddof=1)) if len(v) > 1 else 0.0
    return {"mean": float(v.mean()), "sd": sd, "se": sd / np.sqrt(len(v)), "min": float(v.min()), "max": float(v.max())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("inputs")
    ap.add_argument("--realisations", type=int, default=8, help="K dithered realisations (besides realisation 0)")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--dither", type=float, default=1e-6)
    ap.add_argument("--quantscope", default=os.path.join(ROOT, "build/app/quantscope"))
    ap.add_argument("--export-args", default="", help="more flags for quantscope export")
    ap.add_argument("--json")
    ap.add_argument("--keep", help="write the export here instead of a temporary folder")
    a = ap.parse_args()
    K = a.realisations
    x = np.load(a.inputs).astype(np.float32)[: a.samples]
    work_ctx = tempfile.TemporaryDirectory() if not a.keep else None
    work = a.keep or work_ctx.name
    os.makedirs(work, exist_ok=True)
    cmd = [a.quantscope, "export", a.model, "--calibration-data", a.inputs, "--calibration-size", str(a.samples),
           "--threads", "1", "--realisation-dither", str(a.dither), "--scale-dither-files", str(K),
           "--output-dir", work] + shlex.split(a.export_args)
    quantscope(cmd)
    with open(os.path.join(work, "report.json")) as fh:
        rep = json.load(fh)
    with open(os.path.join(work, "dither_realisations.json")) as fh:
        ours = [o["snr_db"] for o in json.load(fh)["outputs"]]  # [output][k], k = 0..K
    files = [os.path.join(work, "quantized.onnx")] + [os.path.join(work, f"quantized.dither{k}.onnx") for k in range(1, K + 1)]
    fl = run_ort(a.model, x, work, "fp32", ["--level", "disabled"])
    ort = [[None] * (K + 1) for _ in fl]
    for k, f in enumerate(files):
        q = run_ort(f, x, work, f"q{k}", ["--level", "disabled", "--disable-qdq"])
        for o, (fo, qo) in enumerate(zip(fl, q)):
            ort[o][k] = snr_db(fo, qo)
        print(json.dumps({"k": k, "ours": [v[k] for v in ours], "ort": [v[k] for v in ort]}), flush=True)
    excluded = sum(1 for l in rep.get("layers", []) if l.get("quantizable") and not l.get("quantized"))
    res = []
    for o in range(len(ours)):
        us, them = np.array(ours[o]), np.array(ort[o])
        d = them[1:] - us[1:]
        st = stats(d)
        res.append({"index": o, "name": rep["outputs"][o].get("name"), "predicted_snr_db": rep["outputs"][o].get("snr_db"),
                    "ours": ours[o], "ort": ort[o], "paired_diff": d.tolist(),
                    "ours_stats": stats(us[1:]), "ort_stats": stats(them[1:]), "diff_stats": st,
                    "t": st["mean"] / st["se"] if st["se"] > 0 else None,
                    "corr": float(np.corrcoef(us[1:], them[1:])[0, 1]) if K > 2 else None,
                    "realisation0": {"ours": float(us[0]), "ort": float(them[0]), "diff": float(them[0] - us[0])}})
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"model": a.model, "inputs": a.inputs, "export_args": a.export_args, "excluded": excluded, "dither": a.dither, "K": K,
                       "outputs": res}, fh, indent=1)
    if work_ctx:
        work_ctx.cleanup()


if __name__ == "__main__":
    main()
