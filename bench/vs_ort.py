#!/usr/bin/python3
"""Side-by-side speed and peak memory of `quantscope run` and ONNX Runtime (onnxruntime-node):
same inputs, same thread count, engines alternating round by round in one run.

usage: bench/vs_ort.py [--build build] [--threads 2] [--runs 10] [--rounds 3] [--batch 1 8]
                       [--only NAME ...] [--model PATH ...] [--shape NAME=1x3x224x224 ...] [--markdown]

Cases: PaddleOCR cls, det and rec (.cache/models), the development zoo (.cache/zoo, made by
scripts/make_zoo.py, run here when models are missing) and any other ONNX file given with
--model. Inputs are made from the model's declared inputs: float inputs uniform in [-1, 1);
integer inputs that index an embedding table (a Gather on an initializer) uniform over the table's
rows, other integer inputs (attention masks) all ones. A symbolic dim other than the first (batch)
needs --shape (the OCR models have theirs built in).

Each round runs each engine once as a process: one warm-up run, then --runs timed runs (the engines
time their own runs, so process start and model load are excluded). The figure is the median over
all timed runs of all rounds. Peak RSS is the process's maximum resident set (GNU time's %M: model, arena and runtime
included; node's own runtime is about 45 MB of ORT's figure)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, ".cache", "models")
ZOO = os.path.join(ROOT, ".cache", "zoo")
OCR = [
    ("det", os.path.join(MODELS, "ch_PP-OCRv4_det_infer.onnx"), {"x": [1, 3, 640, 640]}),
    ("rec", os.path.join(MODELS, "ch_PP-OCRv4_rec_infer.onnx"), {"x": [1, 3, 48, 320]}),
    ("cls", os.path.join(MODELS, "ch_ppocr_mobile_v2.0_cls_infer.onnx"), {"x": [1, 3, 48, 192]}),
]
NP_TYPES = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32,
            onnx.TensorProto.DOUBLE: np.float64, onnx.TensorProto.UINT8: np.uint8, onnx.TensorProto.INT8: np.int8,
            onnx.TensorProto.BOOL: np.bool_}


def zoo_cases():
    names = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "make_zoo.py"), "--list"], check=True,
                           capture_output=True, text=True).stdout.split()
    if any(not os.path.exists(os.path.join(ZOO, n + ".onnx")) for n in names):
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "make_zoo.py"), ZOO], check=True)
    # Inputs with symbolic dims past the batch get a typical size (the LSTM's frames).
    shapes = {"lstm_speech": {"features": [1, 200, 40]}}
    return [(n, os.path.join(ZOO, n + ".onnx"), shapes.get(n, {})) for n in names]


def embedding_rows(model, name):
    """Rows of the table a Gather looks `name` up in (token ids), or None."""
    inits = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == name and node.input[0] in inits:
            return inits[node.input[0]].dims[0]
    return None


def make_inputs(path, shapes, batch, rng):
    model = onnx.load(path, load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    feeds = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        if vi.name in shapes:
            shape = list(shapes[vi.name])
        else:
            shape = []
            for k, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value"):
                    shape.append(d.dim_value)
                elif k == 0:
                    shape.append(1)
                else:
                    raise SystemExit(f"{path}: input '{vi.name}' dim {k} is symbolic: give --shape {vi.name}=...")
        if tt.shape.dim and tt.shape.dim[0].HasField("dim_value") and tt.shape.dim[0].dim_value != batch:
            return None  # a fixed batch (the NMS detector's 1): other batch sizes do not apply
        shape[0] = batch
        dtype = NP_TYPES.get(tt.elem_type)
        if dtype is None:
            raise SystemExit(f"{path}: input '{vi.name}' has an element type this bench does not fill")
        if np.issubdtype(dtype, np.floating):
            x = rng.uniform(-1, 1, size=shape).astype(dtype)
        else:
            rows = embedding_rows(model, vi.name)
            x = rng.integers(0, rows, size=shape).astype(dtype) if rows else np.ones(shape, dtype)
        feeds.append((vi.name, x))
    return feeds


def timed_run(cmd):
    """Runs cmd, returns (its JSON timing line, its peak RSS in bytes). The RSS comes from GNU time
    (/usr/bin/time -f %M), whose child is forked from a small process: getrusage of a child forked
    from this Python process would count the Python image it was forked from."""
    env = dict(os.environ, ORT_DISABLE_TELEMETRY="1")
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss_file:
        out = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file.name] + cmd, capture_output=True, text=True,
                             env=env)
        if out.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[-500:]}")
        rss_kb = int(rss_file.read().split()[-1])
    line = [l for l in out.stdout.splitlines() if l.startswith("{")][-1]
    return json.loads(line), rss_kb * 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 8])
    ap.add_argument("--only", nargs="*", help="case names (det, rec, cls, zoo names, model file stems)")
    ap.add_argument("--model", nargs="*", default=[], help="other ONNX files to run")
    ap.add_argument("--shape", nargs="*", default=[], help="NAME=1x3x224x224 for inputs with symbolic dims")
    ap.add_argument("--no-zoo", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    qs = os.path.join(args.build, "app", "quantscope")
    ort = os.path.join(ROOT, "tests", "support", "ort_run.mjs")
    extra_shapes = {}
    for s in args.shape:
        name, dims = s.split("=", 1)
        extra_shapes[name] = [int(d) for d in dims.split("x")]
    cases = list(OCR) + ([] if args.no_zoo else zoo_cases())
    cases += [(os.path.splitext(os.path.basename(p))[0], os.path.abspath(p), {}) for p in args.model]
    if args.only:
        cases = [c for c in cases if c[0] in args.only]
    rng = np.random.default_rng(7)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, shapes in cases:
            for batch in args.batch:
                feeds = make_inputs(path, {**shapes, **extra_shapes}, batch, rng)
                if feeds is None:
                    continue
                for i, (_, x) in enumerate(feeds):
                    np.save(os.path.join(tmp, f"in_{i}.npy"), x)
                np.savez(os.path.join(tmp, "in.npz"), **dict(feeds))
                ours, theirs, rss_q, rss_o = [], [], 0, 0
                for _ in range(args.rounds):
                    # --repeat gives one untimed warm-up (the first run) then R timed runs.
                    r, rss = timed_run([qs, "run", path, "--input", os.path.join(tmp, "in.npz"), "--threads",
                                        str(args.threads), "--repeat", str(args.runs)])
                    ours.append(r["ms_median"])
                    rss_q = max(rss_q, rss)
                    r, rss = timed_run(["node", ort, path, tmp, "", "--threads", str(args.threads), "--repeat",
                                        str(args.runs)])
                    theirs.append(r["ms_median"])
                    rss_o = max(rss_o, rss)
                q, o = statistics.median(ours), statistics.median(theirs)
                shape = "x".join(map(str, feeds[0][1].shape))
                rows.append((f"{name} {shape}", q, o, q / o, rss_q / 1e6, rss_o / 1e6))
                print(f"{rows[-1][0]:34s} quantscope {q:9.2f} ms   onnxruntime {o:9.2f} ms   ratio {q / o:5.2f}x   "
                      f"peak RSS {rss_q / 1e6:7.0f} / {rss_o / 1e6:7.0f} MB", file=sys.stderr, flush=True)
    if args.markdown:
        print("| case | quantscope ms (median) | ONNX Runtime ms (median) | ratio | peak RSS ours MB | peak RSS ORT MB |")
        print("|---|---:|---:|---:|---:|---:|")
        for case, q, o, r, mq, mo in rows:
            print(f"| {case} | {q:.2f} | {o:.2f} | {r:.2f}x | {mq:.0f} | {mo:.0f} |")


if __name__ == "__main__":
    main()
