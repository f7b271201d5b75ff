#!/usr/bin/python3
"""Bounded memory (issue 16): peak RSS and wall time of `quantscope analyze` (defaults: graph-wise,
layer-wise, split, fast sensitivity) on random inputs, with the default --memory-budget and with one
that forces streaming, against the issue's bound: peak RSS <= 1.5 x (the model's weights + one float
pass's activations).

usage: bench/memory_budget.py [--build build] [--samples 8] [--forced 64M] [--threads 0]
                              [--exact] [MODEL ...]
MODEL: a name of .cache/zoo (default: bert_encoder gpt_decoder swin_t gpt32; make gpt32 with
scripts/make_zoo.py .cache/zoo --only gpt32) or a path. "Weights" is `quantscope info`'s
parameter_bytes; "one float pass's activations" is every node output of a float pass over the
same samples (the graph inputs, token ids or one image per sample, are left out), from `quantscope run --profile` on one sample times the
samples; the live peak of one sample's pass (peak_live_tensor_bytes) is printed beside it. Each
analyze is its own process, so its peak RSS is its own. --exact adds --sensitivity exact runs."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, ORT_DISABLE_TELEMETRY="1"))
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-400:]}")
    return p, time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", default=["bert_encoder", "gpt_decoder", "swin_t", "gpt32"])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--forced", default="64M", help="a --memory-budget below the float table: forces streaming")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--exact", action="store_true")
    args = ap.parse_args()
    qs = os.path.join(args.build, "app", "quantscope")
    MB = 1e6
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            path = name if name.endswith(".onnx") else os.path.join(ROOT, ".cache", "zoo", name + ".onnx")
            if not os.path.exists(path):
                print(f"{name}: {path} missing, skipped", file=sys.stderr)
                continue
            info = json.loads(run([qs, "info", path, "--json"])[0].stdout)
            prof = os.path.join(tmp, "profile.json")
            shapes = []  # batch 1 for the symbolic batch dim
            for i in info["inputs"]:
                dims = [1 if k == 0 and not isinstance(d, int) else d for k, d in enumerate(i["shape"])]
                if all(isinstance(d, int) for d in dims):
                    shapes += ["--shape", i["name"] + "=" + "x".join(str(d) for d in dims)]
            run([qs, "run", path, "--random-input", "--profile", prof, "--threads", str(args.threads)] + shapes)
            p = json.load(open(prof))
            one = sum(n["output_bytes"] for n in p["nodes"])
            weights = info["parameter_bytes"]
            table = one * args.samples
            bound = 1.5 * (weights + table)
            modes = [("fast", None), ("fast", args.forced)]
            if args.exact:
                modes += [("exact", None), ("exact", args.forced)]
            for sens, budget in modes:
                report = os.path.join(tmp, "report.json")
                cmd = [qs, "analyze", path, "--calibration-size", str(args.samples), "--threads", str(args.threads),
                       "--calibration-method", "max", "--sensitivity", sens, "--report", report]
                if budget:
                    cmd += ["--memory-budget", budget]
                _, secs = run(cmd)
                r = json.load(open(report))
                rss = r["peak_rss_bytes"]
                rows.append((name, sens, budget or "default", r["memory_budget_bytes"] / 2**30, r["streamed"], secs,
                             rss / MB, weights / MB, table / MB, p["peak_live_tensor_bytes"] / MB, bound / MB,
                             rss <= bound, info["node_count"]))
                print(rows[-1], file=sys.stderr, flush=True)
    print("| Model | Nodes | Sensitivity | Budget | Streamed | Wall time | Peak RSS | Weights | Float activations "
          f"({args.samples} samples) | Live peak (1 sample) | 1.5 x (weights + activations) | Bound met |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (name, sens, budget, gib, streamed, secs, rss, w, t, live, bound, met, nodes) in rows:
        btxt = f"{budget} ({gib:.2f} GiB)" if budget == "default" else budget
        print(f"| {name} | {nodes} | {sens} | {btxt} | {'yes' if streamed else 'no'} | {secs:.1f} s | {rss:.0f} MB | "
              f"{w:.0f} MB | {t:.0f} MB | {live:.0f} MB | {bound:.0f} MB | {'yes' if met else 'no'} |")


if __name__ == "__main__":
    main()
