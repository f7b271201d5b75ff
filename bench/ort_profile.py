#!/usr/bin/python3
"""Per-op time of one model in quantscope and in ONNX Runtime (its own profiler), side by side.

usage: bench/ort_profile.py MODEL [--shape NAME=1x3x224x224 ...] [--batch 1] [--threads 2] [--runs 30]
                            [--build build] [--top 25]

Same inputs as bench/vs_ort.py. ONNX Runtime: onnxruntime-node with `enableProfiling`, one warm-up then --runs
runs; a node's time is the median of its kernel times over the timed runs. quantscope: `quantscope run --repeat
--profile` (the profile is one warm run after the timed ones). Nodes do not map one to one (each engine fuses its
own way), so both are listed by op type and by their slowest nodes; the totals show how much of each run is spent
outside the kernels (scheduling, thread wake-ups, allocation)."""
import argparse
import collections
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vs_ort  # noqa: E402


def ort_profile(model, tmp, threads, runs):
    prefix = os.path.join(tmp, "ortprof")
    out = subprocess.run(["node", os.path.join(vs_ort.ROOT, "tests", "support", "ort_run.mjs"), model, tmp, "",
                          "--threads", str(threads), "--repeat", str(runs), "--profile", prefix],
                         capture_output=True, text=True, env=dict(os.environ, ORT_DISABLE_TELEMETRY="1"))
    if out.returncode != 0:
        raise SystemExit(f"onnxruntime failed: {out.stderr.strip()[-500:]}")
    timing = json.loads([l for l in out.stdout.splitlines() if l.startswith('{"ms_median"')][-1])
    events = json.load(open(sorted(glob.glob(prefix + "*.json"))[-1]))
    per_node = collections.defaultdict(list)
    ops = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][:-len("_kernel_time")]
            per_node[name].append(e["dur"] / 1000.0)
            ops[name] = e.get("args", {}).get("op_name", "?")
    # Each node ran runs + 2 times (the first run, the warm-up of --repeat... ) : keep the last `runs`.
    nodes = {n: statistics.median(v[-runs:]) for n, v in per_node.items()}
    return timing["ms_median"], nodes, ops


def ours_profile(qs, model, npz, threads, runs, tmp):
    path = os.path.join(tmp, "qs_profile.json")
    out = subprocess.run([qs, "run", model, "--input", npz, "--threads", str(threads), "--repeat", str(runs),
                          "--profile", path], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"quantscope failed: {out.stderr.strip()[-500:]}")
    timing = json.loads([l for l in out.stdout.splitlines() if l.startswith("{")][-1])
    prof = json.load(open(path))
    nodes = {n["name"]: n["ms"] for n in prof["nodes"]}
    ops = {n["name"]: n["op_type"] for n in prof["nodes"]}
    return timing["ms_median"], nodes, ops, prof["total_ms"]


def by_op(nodes, ops):
    total = collections.defaultdict(float)
    count = collections.Counter()
    for n, ms in nodes.items():
        total[ops[n]] += ms
        count[ops[n]] += 1
    return sorted(((ms, op, count[op]) for op, ms in total.items()), reverse=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--shape", nargs="*", default=[])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--build", default=os.path.join(vs_ort.ROOT, "build"))
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    shapes = {}
    for s in args.shape:
        name, dims = s.split("=", 1)
        shapes[name] = [int(d) for d in dims.split("x")]
    for name, path, builtin in vs_ort.OCR:
        if os.path.abspath(args.model) == path:
            shapes = {**builtin, **shapes}
    if os.path.basename(args.model) == "lstm_speech.onnx":
        shapes = {"features": [1, 200, 40], **shapes}
    feeds = vs_ort.make_inputs(args.model, shapes, args.batch, np.random.default_rng(7))
    if feeds is None:
        raise SystemExit(f"{args.model}: batch {args.batch} does not apply (fixed batch)")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (_, x) in enumerate(feeds):
            np.save(os.path.join(tmp, f"in_{i}.npy"), x)
        npz = os.path.join(tmp, "in.npz")
        np.savez(npz, **dict(feeds))
        o_ms, o_nodes, o_ops = ort_profile(args.model, tmp, args.threads, args.runs)
        q_ms, q_nodes, q_ops, q_prof_ms = ours_profile(os.path.join(args.build, "app", "quantscope"), args.model, npz,
                                                       args.threads, args.runs, tmp)
    print(f"median run: quantscope {q_ms:.3f} ms (profiled run {q_prof_ms:.3f} ms, kernels {sum(q_nodes.values()):.3f}"
          f" ms, {len(q_nodes)} nodes) | onnxruntime {o_ms:.3f} ms (kernels {sum(o_nodes.values()):.3f} ms, "
          f"{len(o_nodes)} nodes)")
    for title, nodes, ops in (("quantscope", q_nodes, q_ops), ("onnxruntime", o_nodes, o_ops)):
        print(f"\n{title}: by op type (ms, count)")
        for ms, op, n in by_op(nodes, ops):
            print(f"  {ms:8.3f}  {n:4d}  {op}")
        print(f"{title}: slowest {args.top} nodes (ms)")
        for n, ms in sorted(nodes.items(), key=lambda kv: -kv[1])[:args.top]:
            print(f"  {ms:8.3f}  {ops[n]:28s} {n}")


if __name__ == "__main__":
    main()
