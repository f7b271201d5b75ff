#!/usr/bin/env python3
"""Measures an exported quantized model against its float model in ONNX Runtime, on the same
preprocessed inputs the analysis read (docs/quality.md, "det and rec at --target-snr 30 after the
backward pass").

The inputs are one .npy (first dimension: samples), e.g. made by --make-inputs from an image folder;
give the same file to `quantscope export --calibration-data FILE.npy` so that the predicted SNR in its
report.json and the SNR measured here are over the same tensors. Runs MODEL and QUANTIZED in
onnxruntime-node (tests/support/ort_batch.mjs; graph optimisations disabled, Q/DQ fusion off for the
quantized model, as the export tests do), then prints per output the SNR pooled over the samples
(10 log10 of sum x^2 over sum (x - q)^2, the analysis's definition) and, with --task, the task
figure: det, the text mask (probability > 0.3) IoU with the float model's mask (mean, worst); rec,
the lines greedy-decoded (argmax, repeats collapsed, blank 0 dropped) like the float model.

usage: fallback_ort_check.py MODEL QUANTIZED INPUTS.npy [--samples N] [--task det|rec] [--report report.json] [--json]
       fallback_ort_check.py --make-inputs DIR WxH MEAN STD OUT.npy
Needs /usr/bin/python3 with numpy (and PIL for --make-inputs) and node with .cache/ort.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from task_agreement_exclusions import greedy  # PaddleOCR's CTC greedy decoding, as there

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_inputs(folder, size, mean, std, out):
    from PIL import Image

    w, h = (int(v) for v in size.split("x"))
    mean = np.array([float(v) for v in mean.split(",")], np.float32)
    std = np.array([float(v) for v in std.split(",")], np.float32)
    xs = []
    for f in sorted(glob.glob(os.path.join(folder, "*.png"))):
        a = np.asarray(Image.open(f).convert("RGB").resize((w, h), Image.BILINEAR), dtype=np.float32) / 255.0
        xs.append(((a - mean) / std).transpose(2, 0, 1))
    if not xs:
        sys.exit(f"{folder}: no .png images")
    np.save(out, np.stack(xs).astype(np.float32))


def run_ort(model, x, work, tag, flags):
    ind = os.path.join(work, "in")
    os.makedirs(ind, exist_ok=True)
    for s in range(len(x)):
        np.save(os.path.join(ind, f"in_{s}_0.npy"), x[s : s + 1])
    outd = os.path.join(work, tag)
    cmd = ["node", os.path.join(ROOT, "tests/support/ort_batch.mjs"), model, ind, outd, "--samples", str(len(x))] + flags
    subprocess.run(cmd, check=True, env=dict(os.environ, ORT_DISABLE_TELEMETRY="1"))
    outs = sorted({int(f.split("_")[2].split(".")[0]) for f in os.listdir(outd) if f.startswith("out_")})
    return [np.concatenate([np.load(os.path.join(outd, f"out_{s}_{o}.npy")) for s in range(len(x))]) for o in outs]


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--make-inputs":
        if len(sys.argv) != 7:
            sys.exit("usage: fallback_ort_check.py --make-inputs DIR WxH MEAN STD OUT.npy")
        make_inputs(*sys.argv[2:7])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("quantized")
    ap.add_argument("inputs")
    ap.add_argument("--task", choices=["det", "rec"])
    ap.add_argument("--report", help="report.json of the export: prints its predicted SNR beside")
    ap.add_argument("--samples", type=int, default=0, help="the first N samples only (the export's --calibration-size)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    x = np.load(a.inputs).astype(np.float32)
    if a.samples > 0:
        x = x[: a.samples]
    with tempfile.TemporaryDirectory() as work:
        f = run_ort(a.model, x, work, "fp32", ["--level", "disabled"])
        q = run_ort(a.quantized, x, work, "q", ["--level", "disabled", "--disable-qdq"])
    res = {"outputs": []}
    predicted, means = {}, {}
    if a.report:
        with open(a.report) as fh:
            rep = json.load(fh)
        for o in rep.get("outputs", []):
            predicted[o.get("name")] = o.get("snr_db")
            if "realisations" in o:  # --realisations: the mean (and sd) a runtime compares with
                means[o.get("name")] = (o["realisations"]["mean_db"], o["realisations"]["sd_db"])
    for i, (fo, qo) in enumerate(zip(f, q)):
        fo64, qo64 = fo.astype(np.float64), qo.astype(np.float64)
        snr = 10 * np.log10((fo64**2).sum() / max(((fo64 - qo64) ** 2).sum(), 1e-300))
        res["outputs"].append({"index": i, "ort_snr_db": round(float(snr), 3)})
    if predicted:
        for o, name in zip(res["outputs"], predicted):
            o["name"], o["predicted_snr_db"] = name, predicted[name]
            if name in means:
                o["predicted_mean_db"], o["predicted_sd_db"] = means[name]
    if a.task == "det":
        ious = []
        for s in range(len(x)):
            mf, mq = f[0][s] > 0.3, q[0][s] > 0.3
            union = np.logical_or(mf, mq).sum()
            ious.append(1.0 if union == 0 else np.logical_and(mf, mq).sum() / union)
        res["mask_iou_mean"], res["mask_iou_worst"] = round(float(np.mean(ious)), 4), round(float(np.min(ious)), 4)
    if a.task == "rec":
        alike = sum(greedy(f[0][s]) == greedy(q[0][s]) for s in range(len(x)))
        res["lines_alike"], res["lines"] = int(alike), len(x)
    if a.json:
        print(json.dumps(res))
    else:
        for o in res["outputs"]:
            p = o.get("predicted_snr_db")
            print(f"output {o.get('name', o['index'])}: ORT SNR {o['ort_snr_db']:.2f} dB"
                  + (f", predicted {p:.2f} dB, difference {o['ort_snr_db'] - p:+.2f} dB" if p is not None else "")
                  + (f"; mean of the realisations {o['predicted_mean_db']:.2f} dB (sd {o['predicted_sd_db']:.2f}), "
                     f"difference {o['ort_snr_db'] - o['predicted_mean_db']:+.2f} dB" if "predicted_mean_db" in o else ""))
        for k in ("mask_iou_mean", "mask_iou_worst", "lines_alike"):
            if k in res:
                print(f"{k}: {res[k]}" + (f" / {res['lines']}" if k == "lines_alike" else ""))


if __name__ == "__main__":
    main()
