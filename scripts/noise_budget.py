#!/usr/bin/env python3
"""How many exclusions a target SNR needs if the output noise were the sum of the nodes' own
noises (docs/quality.md, "det and rec at --target-snr 30 after the backward pass").

Reads a report.json written with sensitivity (`quantscope analyze|export ... --sensitivity
fast|exact --report|--output-dir`): each quantizable node's `sensitivity_snr_db` (the output SNR
with that node alone quantized) as a noise power 10^(-snr/10). Prints the additive prediction of
the all-INT8 output SNR, the fewest exclusions that reach the target under that model (the
noisiest nodes first: the best any exclusion order can do if the noises add), the noise left with
at most 10 % / 5 % of the quantizable nodes excluded, and by how many dB every remaining node's
noise would have to fall (a remedy's gain, uniformly) for those budgets to reach the target.

usage: noise_budget.py REPORT.json [--target 30] [--top 10]
"""
import argparse
import json
import math


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--target", type=float, default=30.0)
    ap.add_argument("--top", type=int, default=10, help="list the N noisiest nodes")
    a = ap.parse_args()
    with open(a.report) as fh:
        rep = json.load(fh)
    # report.json writes an infinite SNR as the string "inf"
    nodes = [(l["node"], l["op_type"], float(l["sensitivity_snr_db"])) for l in rep["layers"]
             if l.get("quantizable") and l.get("sensitivity_snr_db") is not None]
    if not nodes:
        raise SystemExit(f"{a.report}: no node has a sensitivity_snr_db (analyse with --sensitivity fast|exact)")
    noise = sorted(((10 ** (-s / 10), n, op, s) for n, op, s in nodes), reverse=True)
    total = sum(p for p, *_ in noise)
    goal = 10 ** (-a.target / 10)
    db = lambda p: -10 * math.log10(p) if p > 0 else float("inf")
    print(f"{len(nodes)} quantizable nodes with a sensitivity; additive all-INT8 prediction {db(total):.2f} dB")
    left, k = total, 0
    while left > goal and k < len(noise):
        left -= noise[k][0]
        k += 1
    print(f"fewest exclusions to {a.target:g} dB if the noises add: {k} ({100 * k / len(nodes):.0f} %)")
    for frac in (0.10, 0.05):
        m = int(frac * len(nodes))
        rest = sum(p for p, *_ in noise[m:])
        need = 10 * math.log10(rest / goal) if rest > goal else 0.0
        print(f"{int(frac * 100)} % budget ({m} nodes): {db(rest):.2f} dB left; every other node's noise must fall "
              f"by {need:.1f} dB")
    by_op = {}
    for p, n, op, s in noise:
        by_op[op] = by_op.get(op, 0) + p
    print("share of the noise by op: " + ", ".join(f"{op} {100 * p / total:.1f} %" for op, p in
                                                    sorted(by_op.items(), key=lambda t: -t[1])))
    for p, n, op, s in noise[: a.top]:
        print(f"  {n:32s} {op:12s} alone {s:6.2f} dB  {100 * p / total:5.1f} % of the noise")


if __name__ == "__main__":
    main()
