#!/usr/bin/env python3
"""How much an output SNR measured on a few samples moves between realisations of the rounding noise
(docs/quality.md, "Realisations of the rounding noise").

A quantized network re-rolls which values round up or down when its input moves by a few ulps: ONNX
Runtime's run and the analysis's are two such realisations. This script makes more of them by
dithering the inputs, x * (1 + EPS * n) with n ~ N(0, 1) drawn per seed (seed 0: the inputs as given),
and measures for each:

- the analysis's output SNR: `quantscope analyze MODEL --calibration-data INPUTS.npy --analysis-data
  DITHERED.npy` with the quantized nodes of REPORT (the export's report.json: its `layers[]` that are
  quantizable but not quantized are excluded by anchored regexes), so that the scales are those of
  the undithered calibration and only the analysed tensors move;
- with --quantized, ONNX Runtime's output SNR of that file against the float model on the same
  dithered inputs (tests/support/ort_batch.mjs, as scripts/fallback_ort_check.py);
- how far the float model's output moved (ONNX Runtime, dithered against seed 0): it must stay far
  above the quantization noise (above ~100 dB), so that the dither changes the rounding, not the task.

With --realisations N it dithers the activation scales instead (one `quantscope analyze --realisations
N`, the option this measurement led to): images normalised from 8-bit pixels never sit within 1e-6 of
a rounding tie at the input point, so an input dither of that size re-rolls nothing there, while the
scale dither re-rolls ties at every activation point, as another runtime's last-bit differences do.

Prints per seed, then mean, sd, min and max over the dithered seeds (1..N) of each figure, and where
seed 0 of each lies in that spread. --json writes everything.

usage: realisation_spread.py MODEL INPUTS.npy --report REPORT.json [--quantized Q.onnx] [--seeds 8]
                             [--eps 1e-6] [--samples 8] [--quantscope BIN] [--analyze-args "..."] [--json OUT]
                             [--realisations N]
Needs /usr/bin/python3 with numpy and node with .cache/ort.
"""
import argparse
import json
import os
import re
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


def dither(x, seed, eps):
    if seed == 0:
        return x
    n = np.random.default_rng(seed).standard_normal(x.shape)
    return (x.astype(np.float64) * (1 + eps * n)).astype(np.float32)


def excluded_of(report):
    with open(report) as fh:
        rep = json.load(fh)
    return [l["node"] for l in rep.get("layers", []) if l.get("quantizable") and not l.get("quantized")], rep


def analyse(a, x_path, excluded, work):
    out = os.path.join(work, "report.json")
    cmd = [a.quantscope, "analyze", a.model, "--calibration-data", a.inputs, "--analysis-data", x_path,
           "--calibration-size", str(a.samples), "--no-sensitivity", "--no-layerwise", "--threads", "1",
           "--report", out] + shlex.split(a.analyze_args)
    for name in excluded:
        cmd += ["--nodes-to-exclude", re.escape(name) + "$"]
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"{a.model}: quantscope analyze failed: {p.stderr.strip().splitlines()[-1:]}")
    with open(out) as fh:
        rep = json.load(fh)
    quantized = sum(1 for l in rep["layers"] if l.get("quantized"))
    return [o["snr_db"] for o in rep["outputs"]], quantized


def stats(v):
    v = np.array(v, np.float64)
    return {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if len(v) > 1 else 0.0, "min": float(v.min()),
            "max": float(v.max())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("inputs")
    ap.add_argument("--report", required=True, help="report.json of the export: its quantized nodes and prediction")
    ap.add_argument("--quantized", help="the exported quantized.onnx: ONNX Runtime's figure per seed")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--quantscope", default=os.path.join(ROOT, "build/app/quantscope"))
    ap.add_argument("--analyze-args", default="", help="more flags for quantscope analyze (the export's remedies)")
    ap.add_argument("--no-analysis", action="store_true", help="ONNX Runtime only")
    ap.add_argument("--realisations", type=int, default=0,
                    help="instead of dithering the inputs: one `quantscope analyze --realisations N` (the activation "
                         "scales dithered), beside ONNX Runtime on the inputs as given")
    ap.add_argument("--json")
    a = ap.parse_args()
    x = np.load(a.inputs).astype(np.float32)[: a.samples]
    excluded, rep = excluded_of(a.report)
    predicted = [o.get("snr_db") for o in rep.get("outputs", [])]
    if a.realisations > 1:
        with tempfile.TemporaryDirectory() as work:
            a.analyze_args += f" --realisations {a.realisations} --realisation-dither {a.eps}"
            out = os.path.join(work, "report.json")
            snr, quantized = analyse(a, a.inputs, excluded, work)
            with open(out) as fh:
                reps = [o.get("realisations") for o in json.load(fh)["outputs"]]
            ort = None
            if a.quantized:
                f = run_ort(a.model, x, work, "fp32", ["--level", "disabled"])
                q = run_ort(a.quantized, x, work, "q", ["--level", "disabled", "--disable-qdq"])
                ort = [snr_db(fo, qo) for fo, qo in zip(f, q)]
        res = []
        for o, r in enumerate(reps):
            v = np.array(r["snr_db"], np.float64)
            entry = {"index": o, "predicted_snr_db": predicted[o], "analysis_snr_db": snr[o], "quantized_nodes": quantized,
                     "realisations": r["snr_db"], "mean": float(v.mean()), "sd": float(v.std(ddof=1)),
                     "min": float(v.min()), "max": float(v.max()),
                     "analysis_rank_above": int(sum(v[1:] < v[0])), "of": len(v) - 1}
            if ort:
                entry["ort_snr_db"] = ort[o]
                entry["ort_z"] = (ort[o] - entry["mean"]) / entry["sd"] if entry["sd"] > 0 else None
                entry["ort_rank_above"] = int(sum(v < ort[o]))
            res.append(entry)
        print(json.dumps(res, indent=1))
        if a.json:
            with open(a.json, "w") as fh:
                json.dump({"model": a.model, "report": a.report, "excluded": len(excluded), "eps": a.eps,
                           "outputs": res}, fh, indent=1)
        return
    rows = []
    with tempfile.TemporaryDirectory() as work:
        f0 = None
        for s in range(a.seeds + 1):
            xs = dither(x, s, a.eps)
            xp = os.path.join(work, f"x_{s}.npy")
            np.save(xp, xs)
            row = {"seed": s}
            if not a.no_analysis:
                row["analysis_snr_db"], row["quantized_nodes"] = analyse(a, xp, excluded, work)
            if a.quantized:
                d = os.path.join(work, f"ort_{s}")
                os.makedirs(d)
                f = run_ort(a.model, xs, d, "fp32", ["--level", "disabled"])
                q = run_ort(a.quantized, xs, d, "q", ["--level", "disabled", "--disable-qdq"])
                row["ort_snr_db"] = [snr_db(fo, qo) for fo, qo in zip(f, q)]
                if s == 0:
                    f0 = f
                else:
                    row["float_moved_db"] = [snr_db(a0, b) for a0, b in zip(f0, f)]
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary = {"model": a.model, "report": a.report, "excluded": len(excluded), "predicted_snr_db": predicted,
               "eps": a.eps, "seeds": a.seeds, "rows": rows, "outputs": []}
    for o in range(len(predicted)):
        entry = {"index": o, "predicted_snr_db": predicted[o]}
        for key in ("analysis_snr_db", "ort_snr_db", "float_moved_db"):
            vals = [r[key][o] for r in rows[1:] if key in r]
            if vals:
                entry[key] = stats(vals)
                if key != "float_moved_db" and key in rows[0]:
                    v0 = rows[0][key][o]
                    entry[key]["seed0"] = v0
                    entry[key]["seed0_rank_above"] = int(sum(v < v0 for v in vals))  # of a.seeds
        if "analysis_snr_db" in entry and "ort_snr_db" in rows[0]:
            st = entry["analysis_snr_db"]
            entry["ort_seed0_z"] = (rows[0]["ort_snr_db"][o] - st["mean"]) / st["sd"] if st["sd"] > 0 else None
        summary["outputs"].append(entry)
    print(json.dumps(summary["outputs"], indent=1))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(summary, fh, indent=1)


if __name__ == "__main__":
    main()
