#!/usr/bin/env python3
"""Float against quantized in ONNX Runtime, for a model ending in a softmax over classes (rec: [N, T, C]):
the softmax output SNR, the logit SNR (log-probabilities centred per step: the logits up to a per-step
constant) and where the softmax error lives (its share in the worst 1 % / 5 % of the steps, and in the
steps where the float top-1 probability leads the second by less than 0.5). docs/quality.md, "rec at
`--target-snr 30`: where its noise lives".

usage: logit_snr_check.py MODEL INPUTS.npy QUANTIZED.onnx [QUANTIZED.onnx ...]   (node with .cache/ort)
"""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fallback_ort_check import run_ort  # noqa: E402

if len(sys.argv) < 4:
    sys.exit(__doc__.strip().splitlines()[-1])
model, x = sys.argv[1], np.load(sys.argv[2])
with tempfile.TemporaryDirectory() as w:
    ref = run_ort(model, x, w, 'fp32', ['--level', 'disabled'])[0]
    outs = {}
    for q in sys.argv[3:]:
        outs[q] = run_ort(q, x, w, 'q' + str(len(outs)), ['--level', 'disabled', '--disable-qdq'])[0]
def snr(a, b): return 10 * np.log10((a.astype(np.float64) ** 2).sum() / ((a.astype(np.float64) - b) ** 2).sum())
def centred_logp(p):
    l = np.log(np.maximum(p.astype(np.float64), 1e-30))
    return l - l.mean(-1, keepdims=True)
lr = centred_logp(ref)
top = np.sort(ref, -1)
margin = top[..., -1] - top[..., -2]  # float top-1 minus top-2 probability, per step
for q, o in outs.items():
    e = ((ref.astype(np.float64) - o) ** 2).sum(-1).ravel()   # softmax squared error per step
    order = np.argsort(-e)
    share = lambda k: e[order[:k]].sum() / e.sum()
    amb = (margin.ravel() < 0.5)
    print('%s: softmax SNR %.2f dB; centred log-prob ("logit") SNR %.2f dB; steps %d; error share of the worst 1%% / 5%% of steps %.1f / %.1f %%; steps with float top-1 margin < 0.5: %d, their share %.1f %%'
          % (os.path.basename(os.path.dirname(q)), snr(ref, o), snr(lr, centred_logp(o)), e.size, 100 * share(max(1, e.size // 100)), 100 * share(max(1, e.size // 20)), amb.sum(), 100 * e[amb].sum() / e.sum()))
