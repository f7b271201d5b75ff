#!/usr/bin/env python3
"""Which quantized nodes break rec's greedy decoding in ONNX Runtime (docs/quality.md, "rec: what
breaks the decoding").

Takes a folder kept by the task agreement test (QS_TASK_AGREEMENT_KEEP=1 ctest -R
TaskAgreement.Rec: in_font/in_0.npy, or in/in_0.npy in folders kept before 2026-11-27, float/out_0.npy,
q/quantized.onnx) and runs variants of the
exported quantized.onnx in ONNX Runtime (tests/support/ort_run.mjs) with chosen nodes taken out of
INT8: each such node reads its float activation (the Q/DQ pair on its input edge is bypassed) and
its original float weight (refitted per output channel where the export rescaled it, e.g. depthwise
input equalization). Prints, per variant, the lines greedy-decoded like the float model, the
character error rate and the output SNR. --noise adds Gaussian noise to the float model's log
probabilities instead, to show how many lines survive a given output SNR.

usage: task_agreement_exclusions.py DIR MODEL [--groups] [--one-at-a-time] [--noise]
Needs python3 with onnx and numpy (/usr/bin/python3 here) and node with .cache/ort.
"""
import argparse
import copy
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def constants(model):
    c = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node if n.op_type == "Constant"}
    c.update({i.name: numpy_helper.to_array(i) for i in model.graph.initializer})
    return c


def greedy(scores):
    """PaddleOCR's CTC greedy decoding: argmax per step, repeats collapsed, blank 0 dropped."""
    out, prev = [], -1
    for t in scores.argmax(-1):
        if t != prev and t != 0:
            out.append(int(t))
        prev = t
    return out


def edit_distance(a, b):
    d = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        p, d[0] = d[:], i
        for j in range(1, len(b) + 1):
            d[j] = min(p[j] + 1, d[j - 1] + 1, p[j - 1] + (a[i - 1] != b[j - 1]))
    return d[len(b)]


class Variants:
    def __init__(self, folder, model):
        self.dir = folder
        self.q = onnx.load(os.path.join(folder, "q", "quantized.onnx"))
        orig = onnx.load(model)
        self.orig_const = constants(orig)
        self.orig_nodes = {n.name: n for n in orig.graph.node}
        self.q_const = constants(self.q)
        self.float = np.load(os.path.join(folder, "float", "out_0.npy")).astype(np.float64)
        self.float_lines = [greedy(x) for x in self.float]

    def quantized_nodes(self):
        prod = {o: n for n in self.q.graph.node for o in n.output}
        return [n.name for n in self.q.graph.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear") and
                any(i in prod and prod[i].op_type == "DequantizeLinear" for i in n.input)]

    def dequantized(self, dq):
        x = self.q_const[dq.input[0]].astype(np.float64)
        s = self.q_const[dq.input[1]].astype(np.float64)
        axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
        if s.size > 1:
            shape = [1] * x.ndim
            shape[axis] = -1
            s = s.reshape(shape)
        return x * s

    def write(self, excluded, path):
        m = copy.deepcopy(self.q)
        prod = {o: n for n in m.graph.node for o in n.output}
        for n in m.graph.node:
            if n.name not in excluded:
                continue
            for k, name in enumerate(n.input):
                dq = prod.get(name)
                if dq is None or dq.op_type != "DequantizeLinear":
                    continue
                q = prod.get(dq.input[0])
                if q is not None and q.op_type == "QuantizeLinear":
                    n.input[k] = q.input[0]
                    continue
                w = self.orig_const[self.orig_nodes[n.name].input[k]].astype(np.float64)
                d = self.dequantized(dq)
                if n.op_type == "Conv" and d.shape == w.shape:
                    axes = tuple(range(1, w.ndim))
                    r = (d * w).sum(axes) / np.maximum((w * w).sum(axes), 1e-30)
                    if np.abs(r - 1).max() > 0.02:  # rescaled by the export: keep its scales
                        w = w * r.reshape((-1,) + (1,) * (w.ndim - 1))
                fw = "float_%s_%d" % (n.name, k)
                m.graph.initializer.append(numpy_helper.from_array(w.astype(np.float32), fw))
                n.input[k] = fw
        onnx.save(m, path)

    def score(self, q):
        q = q.astype(np.float64)
        alike = edits = chars = 0
        for a, x in zip(self.float_lines, q):
            b = greedy(x)
            alike += a == b
            edits += edit_distance(a, b)
            chars += len(a)
        snr = 10 * np.log10((self.float ** 2).sum() / max(((self.float - q) ** 2).sum(), 1e-30))
        return alike, 100.0 * edits / max(chars, 1), snr

    def measure(self, excluded):
        path = os.path.join(self.dir, "variant.onnx")
        out = os.path.join(self.dir, "variant_out")
        self.write(set(excluded), path)
        inputs = os.path.join(self.dir, "in_font")
        if not os.path.isdir(inputs):
            inputs = os.path.join(self.dir, "in")
        subprocess.run(["node", os.path.join(ROOT, "tests/support/ort_run.mjs"), path, inputs, out,
                        "--threads", "2"], check=True, env=dict(os.environ, ORT_DISABLE_TELEMETRY="1"))
        return self.score(np.load(os.path.join(out, "out_0.npy")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("model")
    ap.add_argument("--groups", action="store_true", help="take node kinds out of INT8 together")
    ap.add_argument("--one-at-a-time", action="store_true", help="take each quantized node out alone")
    ap.add_argument("--noise", action="store_true", help="lines alike against output SNR, float + logit noise")
    a = ap.parse_args()
    v = Variants(a.dir, a.model)
    n = len(v.float_lines)
    show = lambda what, r: print("%-28s %2d/%d lines alike, CER %5.1f %%, output SNR %6.2f dB" % ((what,) + r[:1] + (n,) + r[1:]),
                                 flush=True)
    if a.noise:
        rng = np.random.default_rng(0)
        logp = np.log(np.maximum(v.float, 1e-30))
        for sigma in (0.02, 0.05, 0.1, 0.2, 0.3, 0.5):
            for _ in range(5):
                z = logp + rng.normal(0, sigma, logp.shape)
                p = np.exp(z - z.max(-1, keepdims=True))
                show("logit noise %.2f" % sigma, v.score(p / p.sum(-1, keepdims=True)))
    nodes = v.quantized_nodes()
    show("none excluded (%d INT8)" % len(nodes), v.measure([]))
    if a.groups:
        depthwise = {name for name, nd in v.orig_nodes.items() if nd.op_type == "Conv" and
                     any(x.name == "group" and x.i > 1 for x in nd.attribute)}
        groups = {
            "depthwise Convs": [x for x in nodes if x in depthwise],
            "other Convs": [x for x in nodes if "Conv" in x and x not in depthwise],
            "MatMuls": [x for x in nodes if "MatMul" in x],
            "pools": [x for x in nodes if "Pool" in x],
            "all but MatMuls": [x for x in nodes if "MatMul" not in x],
            "all": nodes,
        }
        for what, ex in groups.items():
            show("%s (%d)" % (what, len(ex)), v.measure(ex))
    if a.one_at_a_time:
        for x in nodes:
            show(x, v.measure([x]))


if __name__ == "__main__":
    sys.exit(main())
