#!/usr/bin/env python3
"""Where a model's activation noise comes from (docs/quality.md, "A pair step in the greedy pass").

Reads MODEL.onnx and a report.json written with the layer-wise analysis and sensitivity
(`quantscope analyze|export ... --sensitivity fast|exact --report|--output-dir`) and prints, per
quantizable Conv/MatMul/Gemm: its quantized input tensor, the op that produces it (through
Mul/Add/Div of constants: PP-LCNetV3's scalar affine blocks are named as "HardSwish+affine"), the
calibration's winner and clip fraction for it (amax chosen / tensor max), the node's activation and
weight SNR (dB, layer-wise) and its sensitivity. Then a summary per producer kind: how many inputs,
the median activation and weight SNR, how many of them clip (fraction < 1), and their share of the
output noise (sensitivities added as noise powers, scripts/noise_budget.py's model).

With a report of `--activation-split on` (docs/quality.md, "Clip noise and rounding noise") it adds
the node's activation SNR split in two (layer-wise: clip part, rounding part), the input tensor's
clipped fraction of elements and the clip part's share of its error, and per producer kind the
medians of both parts and how many inputs clip noise dominates (at the consumer).

usage: activation_noise.py MODEL.onnx REPORT.json [--all]
"""
import argparse
import json
import math
import statistics

import onnx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("report")
    ap.add_argument("--all", action="store_true", help="print every node, not only the summary")
    a = ap.parse_args()
    g = onnx.load(a.model, load_external_data=False).graph
    consts = {i.name for i in g.initializer} | {o for n in g.node if n.op_type == "Constant" for o in n.output}
    producer = {o: n for n in g.node for o in n.output}
    nodes = {n.name: n for n in g.node}
    rep = json.load(open(a.report))
    tensors = {t["name"]: t for t in rep["tensors"]}

    def kind(name):
        seen = []
        while name in producer:
            p = producer[name]
            dyn = [i for i in p.input if i and i not in consts]
            if p.op_type in ("Mul", "Add", "Sub", "Div") and len(dyn) == 1:
                seen.append(p.op_type)
                name = dyn[0]
                continue
            op = p.op_type
            if op == "Mul" and len(dyn) == 2:
                # x * clip(x + 3, 0, 6) / 6 is HardSwish as paddle2onnx writes it; x * sigmoid(.) a gate
                ins = {producer[i].op_type for i in dyn if i in producer}
                op = "HardSwish" if "Clip" in ins else "Mul (gate)" if ins & {"Sigmoid", "HardSigmoid"} else op
            return op + ("+affine" if seen else "")
        return "graph input"

    def num(v):
        if v is None:
            return math.nan
        return math.inf if v == "inf" else float(v)

    rows = []
    for l in rep["layers"]:
        if not l.get("quantizable") or l["op_type"] not in ("Conv", "MatMul", "Gemm", "ConvTranspose"):
            continue
        n = nodes.get(l["node"])
        if n is None:
            continue
        x = n.input[0]
        t = tensors.get(x, {})
        auto = t.get("auto") or {}
        frac = auto.get("clip_fraction")
        sens = l.get("sensitivity_snr_db")
        sens = float(sens) if sens is not None else math.nan
        group = 1
        for at in n.attribute:
            if at.name == "group":
                group = at.i
        rows.append(dict(node=l["node"], op=l["op_type"] + ("/dw" if group > 1 else ""), input=x, kind=kind(x),
                         winner=auto.get("winner", t.get("method")), frac=frac,
                         act=l.get("activation_snr_db"), w=l.get("weight_snr_db"), sens=sens,
                         clip=num(l.get("activation_clip_snr_db")), rnd=num(l.get("activation_rounding_snr_db")),
                         split=t.get("noise_split")))
    noise = {r["node"]: 10 ** (-r["sens"] / 10) for r in rows if not math.isnan(r["sens"])}
    total = sum(noise.values()) or 1
    if a.all:
        for r in sorted(rows, key=lambda r: r["sens"]):
            f = "-" if r["frac"] is None else f"{r['frac']:.3f}"
            act = "-" if r["act"] is None else f"{float(r['act']):.1f}"
            w = "-" if r["w"] is None else f"{float(r['w']):.1f}"
            sp = r["split"]
            extra = ""
            if sp is not None or not math.isnan(r["clip"]):
                cf = "-" if sp is None else f"{100 * float(sp['clipped_fraction']):.4f} %"
                cs = "-" if sp is None else f"{100 * float(sp['clip_share']):.0f} %"
                extra = f" | act clip {r['clip']:5.1f} round {r['rnd']:5.1f} | tensor clipped {cf} clip share {cs}"
            print(f"{r['node']:22s} {r['op']:10s} {r['kind']:18s} {str(r['winner']):22s} clip {f:>6s} "
                  f"act {act:>5s} w {w:>5s} sens {r['sens']:6.2f} share {100 * noise.get(r['node'], 0) / total:5.1f} %"
                  + extra)
    split = any(not math.isnan(r["clip"]) for r in rows)
    print(f"{'input made by':22s} {'nodes':>5s} {'act SNR med':>11s} {'w SNR med':>9s} {'clipped':>7s} {'noise share':>11s}"
          + (f" {'clip SNR med':>12s} {'round SNR med':>13s} {'clip dominates':>14s}" if split else ""))
    for k in sorted({r["kind"] for r in rows}):
        rs = [r for r in rows if r["kind"] == k]
        acts = [float(r["act"]) for r in rs if r["act"] is not None]
        ws = [float(r["w"]) for r in rs if r["w"] is not None]
        clipped = sum(1 for r in rs if r["frac"] is not None and r["frac"] < 0.999)
        share = 100 * sum(noise.get(r["node"], 0) for r in rs) / total
        print(f"{k:22s} {len(rs):5d} {statistics.median(acts) if acts else math.nan:11.1f} "
              f"{statistics.median(ws) if ws else math.nan:9.1f} {clipped:7d} {share:10.1f} %", end="")
        if split:
            cl = [r["clip"] for r in rs if not math.isnan(r["clip"])]
            rd = [r["rnd"] for r in rs if not math.isnan(r["rnd"])]
            dom = sum(1 for r in rs if r["clip"] < r["rnd"])
            print(f" {statistics.median(cl) if cl else math.nan:12.1f} {statistics.median(rd) if rd else math.nan:13.1f} "
                  f"{dom:14d}", end="")
        print()
    below = sum(1 for r in rows if r["act"] is not None and r["w"] is not None and float(r["act"]) < float(r["w"]))
    print(f"activation SNR below weight SNR: {below} of {len(rows)} nodes")


if __name__ == "__main__":
    main()
