#!/usr/bin/python3
"""The development model zoo (issue 13): common architectures exported to ONNX from Debian's
python3-torch / python3-torchvision with random weights, never downloaded.

usage: scripts/make_zoo.py OUT_DIR [--only NAME ...] [--list]

CNNs (torchvision, opset 13, input 'input' [N,3,224,224]): their BatchNorm statistics are
re-estimated on synthetic images (smooth colour fields, edges and noise, normalised like ImageNet)
so that activations have the scales of a trained network instead of the identity statistics of a
fresh one. Transformers (opset 17): swin_t from torchvision, and two written here with torch.nn:
a BERT-style encoder (6 layers, d=384, 12 heads, sequence 128, int64 token ids and an attention
mask) and a GPT-style decoder (8 layers, d=512, 8 heads, causal mask, sequence 128, logits over an
8192-token vocabulary). Issue 19's models (opset 13): lstm_speech (2-layer bidirectional LSTM over
40 mel features), scripted_control (torch.jit.script: a data-dependent If and a Loop whose trip
count comes from the input) and nms_detector (a small conv detector ending in NonMaxSuppression).
On request only (`--only gpt32`, not listed): issue 16's gpt32, the GPT-style decoder with 32
blocks, d=256, 4 heads, sequence 64. Every model has a dynamic batch axis. Fixed seeds: the same files every time.
Files already present are kept (delete one to rebuild it); each is written to a temporary name and
renamed, so an interrupted run leaves no half-written model.
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SEQ = 128
VOCAB = 8192


def synthetic_images(n, size=224, seed=0):
    """Images with natural-image statistics: low-frequency colour fields plus edges plus a little
    noise, in [0, 1], then normalised with ImageNet's mean and std."""
    g = torch.Generator().manual_seed(seed)
    low = torch.rand(n, 3, 7, 7, generator=g)
    img = F.interpolate(low, size=(size, size), mode="bicubic", align_corners=False)
    # Hard edges: a random half-plane per image brightens or darkens one side.
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size), indexing="ij")
    for i in range(n):
        a = torch.rand(3, generator=g) * 2 - 1
        side = ((a[0] * xx + a[1] * yy + a[2] * 0.5) > 0).float()
        img[i] += (torch.rand(1, generator=g) - 0.5) * side
    img += 0.05 * torch.randn(img.shape, generator=g)
    img = img.clamp(0, 1)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    return (img - mean) / std


def reestimate_batchnorm(model, batches=4, batch_size=16):
    """Cumulative BatchNorm statistics over synthetic images (momentum None = plain average)."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        for b in range(batches):
            model(synthetic_images(batch_size, seed=100 + b))
    model.eval()


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, ff, causal):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ff)
        self.fc2 = nn.Linear(ff, d)
        if causal:
            self.register_buffer("mask", torch.tril(torch.ones(SEQ, SEQ, dtype=torch.bool)).view(1, 1, SEQ, SEQ))

    def attention(self, x, bias):
        n, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(x).split(d, dim=-1)
        q = q.view(n, t, h, d // h).transpose(1, 2)
        k = k.view(n, t, h, d // h).transpose(1, 2)
        v = v.view(n, t, h, d // h).transpose(1, 2)
        s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // h)
        if self.causal:
            s = s.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
        if bias is not None:
            s = s + bias
        p = torch.softmax(s, dim=-1)
        o = torch.matmul(p, v).transpose(1, 2).reshape(n, t, d)
        return self.proj(o)

    def forward(self, x, bias=None):
        if self.causal:  # GPT: pre-norm
            x = x + self.attention(self.ln1(x), bias)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        x = self.ln1(x + self.attention(x, bias))  # BERT: post-norm
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class BertEncoder(nn.Module):
    def __init__(self, layers=6, d=384, heads=12):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Embedding(SEQ, d)
        self.ln = nn.LayerNorm(d)
        self.layers = nn.ModuleList([EncoderLayer(d, heads, 4 * d, causal=False) for _ in range(layers)])
        self.pool = nn.Linear(d, d)

    def forward(self, input_ids, attention_mask):
        t = input_ids.shape[1]
        pos = torch.arange(t, device=input_ids.device).unsqueeze(0)
        x = self.ln(self.tok(input_ids) + self.pos(pos))
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        return x, torch.tanh(self.pool(x[:, 0]))


class GptDecoder(nn.Module):
    def __init__(self, layers=8, d=512, heads=8):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Embedding(SEQ, d)
        self.layers = nn.ModuleList([EncoderLayer(d, heads, 4 * d, causal=True) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        pos = torch.arange(t, device=input_ids.device).unsqueeze(0)
        x = self.tok(input_ids) + self.pos(pos)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln(x))


def scale_init(model, std=0.02):
    """GPT/BERT-style initialisation: N(0, 0.02) weights, zero biases."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=std)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)


def cnn(factory):
    def build():
        import torchvision
        model = getattr(torchvision.models, factory)(weights=None)
        reestimate_batchnorm(model)
        return model, (synthetic_images(1),), ["input"], ["logits"], {"input": {0: "batch"}, "logits": {0: "batch"}}, 13
    return build


def swin():
    import torchvision
    model = torchvision.models.swin_t(weights=None).eval()
    return model, (synthetic_images(1),), ["input"], ["logits"], {"input": {0: "batch"}, "logits": {0: "batch"}}, 17


def bert():
    model = BertEncoder()
    scale_init(model)
    model.eval()
    ids = torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    axes = {"input_ids": {0: "batch"}, "attention_mask": {0: "batch"}, "hidden": {0: "batch"}, "pooled": {0: "batch"}}
    return model, (ids, mask), ["input_ids", "attention_mask"], ["hidden", "pooled"], axes, 17


def gpt():
    model = GptDecoder()
    scale_init(model)
    model.eval()
    ids = torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(4))
    return model, (ids,), ["input_ids"], ["logits"], {"input_ids": {0: "batch"}, "logits": {0: "batch"}}, 17


def gpt32():
    """Issue 16's deep decoder: 32 pre-norm blocks, d=256, 4 heads, 64 tokens (random weights)."""
    model = GptDecoder(layers=32, d=256, heads=4)
    scale_init(model)
    model.eval()
    ids = torch.randint(0, VOCAB, (1, 64), generator=torch.Generator().manual_seed(5))
    return model, (ids,), ["input_ids"], ["logits"], {"input_ids": {0: "batch"}, "logits": {0: "batch"}}, 17


class LstmSpeech(nn.Module):
    """Speech-style (issue 19): 40 mel features -> conv front end -> 2-layer bidirectional LSTM ->
    per-frame log-probabilities over 32 classes."""
    def __init__(self, feats=40, hidden=96, classes=32):
        super().__init__()
        self.front = nn.Conv1d(feats, 64, 3, padding=1)
        self.lstm = nn.LSTM(64, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(2 * hidden, classes)
    def forward(self, x):  # [N, T, 40]
        h = F.relu(self.front(x.transpose(1, 2))).transpose(1, 2)
        y, _ = self.lstm(h)
        return self.head(y).log_softmax(-1)

class ScriptedControl(nn.Module):
    """Data-dependent control flow as torch.jit.script exports it: If on a statistic of the
    activations, a Loop whose trip count is computed from the input, and a while-style early exit."""
    def __init__(self, d=64):
        super().__init__()
        self.inp = nn.Linear(16, d)
        self.a = nn.Linear(d, d)
        self.b = nn.Linear(d, d)
        self.step = nn.Linear(d, d)
        self.out = nn.Linear(d, 10)
    def forward(self, x):
        h = torch.relu(self.inp(x))
        if bool(h.mean() > 0.25):
            h = torch.relu(self.a(h))
        else:
            h = torch.tanh(self.b(h))
        steps = int((x[:, 0] > 0).sum()) + 1
        for i in range(steps):
            h = h + 0.5 * torch.tanh(self.step(h))
        return self.out(h)

class NmsDetector(nn.Module):
    """A small single-scale detector: conv backbone, per-cell boxes and class scores, then
    torchvision's NMS (exported as NonMaxSuppression)."""
    def __init__(self, classes=4, cells=16):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                                      nn.Conv2d(32, 32, 3, 2, 1), nn.ReLU())
        self.box = nn.Conv2d(32, 4, 1)
        self.cls = nn.Conv2d(32, classes, 1)
    def forward(self, x):  # [1, 3, 128, 128]
        f = self.backbone(x)
        n, _, h, w = f.shape
        d = self.box(f).permute(0, 2, 3, 1).reshape(-1, 4)
        s = self.cls(f).sigmoid().permute(0, 2, 3, 1).reshape(-1, self.cls.out_channels)
        ys = torch.arange(h, dtype=torch.float32).view(h, 1).expand(h, w).reshape(-1)
        xs = torch.arange(w, dtype=torch.float32).view(1, w).expand(h, w).reshape(-1)
        cx = (xs + 0.5 + d[:, 0].tanh()) * 8
        cy = (ys + 0.5 + d[:, 1].tanh()) * 8
        bw = 16 * d[:, 2].exp()
        bh = 16 * d[:, 3].exp()
        boxes = torch.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], 1)
        score, label = s.max(1)
        keep = torchvision.ops.batched_nms(boxes, score, label, 0.5)
        keep = keep[:50]
        return boxes[keep], score[keep], label[keep], keep


def lstm_speech():
    model = LstmSpeech().eval()
    axes = {"features": {0: "batch", 1: "frames"}, "log_probs": {0: "batch", 1: "frames"}}
    return model, (torch.randn(1, 50, 40),), ["features"], ["log_probs"], axes, 13


def scripted_control():
    model = torch.jit.script(ScriptedControl().eval())
    return model, (torch.randn(4, 16),), ["x"], ["y"], {"x": {0: "batch"}, "y": {0: "batch"}}, 13


def nms_detector():
    model = NmsDetector().eval()
    return model, (torch.randn(1, 3, 128, 128),), ["image"], ["boxes", "scores", "labels", "keep"], {}, 13


# name -> builder; the small ones first (tests use those).
ZOO = {
    "mobilenet_v2": cnn("mobilenet_v2"),
    "shufflenet_v2_x1_0": cnn("shufflenet_v2_x1_0"),
    "regnet_y_400mf": cnn("regnet_y_400mf"),
    "bert_encoder": bert,
    "gpt_decoder": gpt,
    # Issue 19: recurrent, control flow (torch.jit.script: If and Loop) and NonMaxSuppression.
    "lstm_speech": lstm_speech,
    "scripted_control": scripted_control,
    "nms_detector": nms_detector,
    "resnet50": cnn("resnet50"),
    "densenet121": cnn("densenet121"),
    "swin_t": swin,
}


# Made on request only (--only NAME), not by --list or setup: bench/gpt32.sh's model (issue 16).
EXTRA = {
    "gpt32": gpt32,
}


def export(name, out_dir):
    path = os.path.join(out_dir, name + ".onnx")
    if os.path.exists(path):
        return False
    torch.manual_seed(1234)
    t0 = time.time()
    model, args, inputs, outputs, axes, opset = {**ZOO, **EXTRA}[name]()
    tmp = path + ".tmp"
    with torch.no_grad():
        torch.onnx.export(model, args, tmp, input_names=inputs, output_names=outputs, dynamic_axes=axes,
                          opset_version=opset, do_constant_folding=True)
    os.replace(tmp, path)
    print(f"zoo: {name} ({os.path.getsize(path) / 1e6:.1f} MB, {time.time() - t0:.1f} s)", file=sys.stderr)
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir", nargs="?")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        print("\n".join(ZOO))
        return
    if not args.out_dir:
        ap.error("OUT_DIR is required")
    names = args.only or list(ZOO)
    for n in names:
        if n not in ZOO and n not in EXTRA:
            ap.error(f"unknown model '{n}' (known: {', '.join([*ZOO, *EXTRA])})")
    os.makedirs(args.out_dir, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    for n in names:
        export(n, args.out_dir)


if __name__ == "__main__":
    main()
