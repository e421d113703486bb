"""Regenerate the real-exporter ONNX test models in this folder.

Run offline with a separate venv that has torch (the project's own venv must not):

    python3 -m venv /work/torchenv
    /work/torchenv/bin/pip install torch==2.13.0 onnx onnxscript onnxruntime numpy
    /work/torchenv/bin/python tests/compiler/real_models/make_models.py

Four small networks written in plain ``torch.nn`` (random seeded weights, BatchNorm
with random running statistics, eval mode) are exported with PyTorch's TorchScript
exporter (opset 13 and 17) and its dynamo exporter (opset 18); two of them are
then quantized with onnxruntime's static quantizer (QDQ and QOperator formats).
Every file is checked with ``onnx.checker`` and run with onnxruntime against
torch (float exports) or just run (quantized ones).  ``manifest.json`` describes
each file, ``inputs.npz`` holds seeded inputs and torch's outputs for them.
"""

from __future__ import annotations

import collections
import hashlib
import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

HERE = Path(__file__).resolve().parent
SEED = 20240607
MAX_FILE = 1 << 20          # 1 MiB per .onnx file
MAX_FOLDER = 8 << 20        # 8 MiB for the whole folder


# --------------------------------------------------------------------------- nets

def conv_bn(cin, cout, k, stride=1, groups=1, act=None):
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + idt)


class ResNetTiny(nn.Module):
    """ResNet-18-shaped: stem, maxpool, two basic blocks, avgpool, fc."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = BasicBlock(8, 8, 1)
        self.layer2 = BasicBlock(8, 16, 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hid = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.conv = nn.Sequential(
            conv_bn(cin, hid, 1, act=nn.ReLU6),                       # 1x1 expand
            conv_bn(hid, hid, 3, stride, groups=hid, act=nn.ReLU6),   # depthwise 3x3
            conv_bn(hid, cout, 1),                                    # 1x1 project
        )

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2Tiny(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 8, 3, 2, act=nn.ReLU6),
            InvertedResidual(8, 8, 1, 2),
            InvertedResidual(8, 16, 2, 4),
            InvertedResidual(16, 16, 1, 4),
            conv_bn(16, 32, 1, act=nn.ReLU6),                         # final 1x1 conv
        )
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(32, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, (1, 1))
        x = torch.flatten(x, 1)
        return self.classifier(x)


class SqueezeExcite(nn.Module):
    def __init__(self, ch, squeeze):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(ch, squeeze, 1)
        self.relu = nn.ReLU()
        self.fc2 = nn.Conv2d(squeeze, ch, 1)
        self.scale_act = nn.Hardsigmoid()

    def forward(self, x):
        s = self.scale_act(self.fc2(self.relu(self.fc1(self.avgpool(x)))))
        return s * x


class MBv3Block(nn.Module):
    def __init__(self, cin, hid, cout, k, stride, se, act):
        super().__init__()
        self.use_res = stride == 1 and cin == cout
        layers = [conv_bn(cin, hid, 1, act=act),
                  conv_bn(hid, hid, k, stride, groups=hid, act=act)]
        if se:
            layers.append(SqueezeExcite(hid, max(hid // 4, 4)))
        layers.append(conv_bn(hid, cout, 1))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return x + y if self.use_res else y


class MBv3Tiny(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 8, 3, 2, act=nn.Hardswish),
            MBv3Block(8, 16, 16, 5, 2, True, nn.Hardswish),    # 5x5 depthwise + SE
            MBv3Block(16, 32, 16, 3, 1, True, nn.ReLU),        # 3x3 depthwise + SE, residual
            conv_bn(16, 48, 1, act=nn.Hardswish),
        )
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(48, 32), nn.Hardswish(),
                                        nn.Dropout(0.2), nn.Linear(32, num_classes))

    def forward(self, x):
        x = torch.flatten(self.avgpool(self.features(x)), 1)
        return self.classifier(x)


class MiscOps(nn.Module):
    """Layers outside the conv/BN/ReLU mainstream, input 1x3x16x16."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv0 = nn.Conv2d(3, 8, 3, 1, 1)
        self.register_buffer("offset", torch.randn(1, 8, 1, 1))
        self.bn = nn.BatchNorm2d(8)                      # after an Add, not a conv
        self.lrelu = nn.LeakyReLU(0.1)
        self.pool = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False,
                                 ceil_mode=True)          # 16 -> 9
        self.up = nn.Upsample(scale_factor=2, mode="nearest")   # 9 -> 18
        self.dil = nn.Conv2d(8, 8, 3, padding=1, dilation=2)     # 16 -> 14
        self.down = nn.Conv2d(16, 8, 3, stride=2, padding=1)     # 18 -> 9
        self.convt = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1,
                                        output_padding=1)        # 9 -> 18
        self.conv1d = nn.Conv1d(4, 4, 3, padding=1)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        y = self.conv0(x)
        y = self.bn(y + self.offset)          # add of a constant tensor, then BN
        y = (y + 1.0) * 0.5                   # scalar add, scalar mul
        y = self.lrelu(y / 2)                 # scalar div
        y = y * torch.sigmoid(y)              # sigmoid gate
        u = self.up(self.pool(y))             # 1x8x18x18
        d = F.pad(self.dil(y), (2, 2, 2, 2))  # 1x8x18x18
        z = torch.cat([u, d], dim=1)          # 1x16x18x18
        z = self.convt(self.down(z))          # 1x4x18x18
        t = self.conv1d(z.reshape(1, 4, 18 * 18))      # 1-D conv on 1x4x324
        g = torch.matmul(t, t.transpose(1, 2)) / 324.0  # rank-3 matmul -> 1x4x4
        return self.fc(torch.flatten(g, 1))


NETS = {
    "resnet_tiny": (ResNetTiny, (1, 3, 32, 32)),
    "mobilenetv2_tiny": (MobileNetV2Tiny, (1, 3, 32, 32)),
    "mbv3_tiny": (MBv3Tiny, (1, 3, 32, 32)),
    "misc_ops": (MiscOps, (1, 3, 16, 16)),
}
QUANT_NETS = ["resnet_tiny", "mobilenetv2_tiny"]
DYNAMIC_BATCH = {"resnet_tiny", "mobilenetv2_tiny"}   # their TorchScript opset-17 export


def build(name):
    cls, shape = NETS[name]
    torch.manual_seed(SEED + sum(map(ord, name)))
    net = cls()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.running_mean.copy_(torch.randn(c) * 0.5)
                m.running_var.copy_(torch.rand(c) * 1.5 + 0.5)
                m.weight.copy_(torch.rand(c) + 0.5)
                m.bias.copy_(torch.randn(c) * 0.2)
    return net.eval(), shape


# --------------------------------------------------------------------------- helpers

def rand_inputs(name, n, shape, salt):
    rng = np.random.default_rng(SEED + salt + sum(map(ord, name)))
    return rng.standard_normal((n, *shape)).astype(np.float32)


def ort_run(path, x, optimize=True):
    """optimize=False (ORT_DISABLE_ALL) runs a QDQ model as float Q/DQ ops (exact
    fake-quant); the default fuses it into integer kernels, which on x86 without VNNI
    may saturate u8*s8 pair sums in int16 (visible in the s8s8 and per-channel files)."""
    so = ort.SessionOptions()
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def dims(vi):
    out = []
    for d in vi.type.tensor_type.shape.dim:
        out.append(d.dim_param if d.HasField("dim_param") else
                   (d.dim_value if d.HasField("dim_value") else None))
    return out


def describe(path, **fields):
    m = onnx.load(str(path))
    onnx.checker.check_model(m, full_check=True)
    opsets = {(o.domain or "ai.onnx"): o.version for o in m.opset_import}
    hist = collections.Counter(n.op_type for n in m.graph.node)
    inits = {i.name for i in m.graph.initializer}
    ins = [i for i in m.graph.input if i.name not in inits]
    size = path.stat().st_size
    assert size <= MAX_FILE, f"{path.name}: {size} bytes > 1 MiB"
    return {
        "file": path.name,
        **fields,
        "opset_imports": opsets,
        "ir_version": m.ir_version,
        "producer": f"{m.producer_name} {m.producer_version}".strip(),
        "inputs": [{"name": i.name, "shape": dims(i)} for i in ins],
        "outputs": [{"name": o.name, "shape": dims(o)} for o in m.graph.output],
        "op_types": dict(sorted(hist.items())),
        "num_nodes": len(m.graph.node),
        "size_bytes": size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }


class Reader(CalibrationDataReader):
    def __init__(self, input_name, data):
        self.input_name = input_name
        self.it = iter(list(data))

    def get_next(self):
        x = next(self.it, None)
        return None if x is None else {self.input_name: x}


def export_ts(net, x, path, opset, dynamic):
    kw = {}
    if dynamic:
        kw["dynamic_axes"] = {"input": {0: "N"}, "output": {0: "N"}}
    torch.onnx.export(net, (x,), str(path), dynamo=False, opset_version=opset,
                      input_names=["input"], output_names=["output"],
                      do_constant_folding=True, **kw)


def export_dynamo(net, x, path, optimize=True):
    prog = torch.onnx.export(net, (x,), dynamo=True, opset_version=18,
                             input_names=["input"], output_names=["output"],
                             optimize=optimize, verbose=False)
    prog.save(str(path), external_data=False)


# --------------------------------------------------------------------------- main

def main():
    warnings.filterwarnings("ignore")
    torch.use_deterministic_algorithms(True)
    for p in HERE.glob("*.onnx"):
        p.unlink()
    manifest = []
    npz = {}

    for name in NETS:
        net, shape = build(name)
        samples = rand_inputs(name, 4, shape, salt=0)       # 4 x (1,C,H,W)
        with torch.no_grad():
            ref = np.stack([net(torch.from_numpy(s)).numpy() for s in samples])
        npz[name] = samples
        npz[name + "__torch_out"] = ref
        x0 = torch.from_numpy(samples[0])

        variants = [
            (f"{name}.ts_op13.onnx", "torchscript", 13, False),
            (f"{name}.ts_op17{'_dynbatch' if name in DYNAMIC_BATCH else ''}.onnx",
             "torchscript", 17, name in DYNAMIC_BATCH),
            (f"{name}.dynamo_op18.onnx", "dynamo", 18, False),
            # Extra: the dynamo exporter with optimize=False. Both exporters' defaults fold
            # Conv+BatchNormalization themselves; this raw form keeps the BN nodes (and
            # Shape/Expand/CastLike noise) so a frontend's own BN folding gets real input.
            (f"{name}.dynamo_op18_noopt.onnx", "dynamo_noopt", 18, False),
        ]
        for fname, exporter, opset, dyn in variants:
            path = HERE / fname
            if exporter == "torchscript":
                export_ts(net, x0, path, opset, dyn)
            else:
                export_dynamo(net, x0, path, optimize=exporter == "dynamo")
            err = 0.0
            for s, r in zip(samples, ref):
                got = ort_run(path, s)
                np.testing.assert_allclose(got, r, rtol=1e-4, atol=1e-5, err_msg=fname)
                err = max(err, float(np.abs(got - r).max()))
            if dyn:   # a batch of 4 through the dynamic axis
                got = ort_run(path, samples[:, 0])
                np.testing.assert_allclose(got, ref[:, 0], rtol=1e-4, atol=1e-5)
            manifest.append(describe(
                path, source_net=name, exporter=exporter, opset=opset,
                torch_version=torch.__version__, dynamic_batch=dyn,
                quantization=None, max_abs_err_vs_torch=err))
            print(f"{fname}: ok (max |ort - torch| = {err:.2e})")

        if name not in QUANT_NETS:
            continue
        src = HERE / f"{name}.ts_op13.onnx"
        calib = rand_inputs(name, 16, shape, salt=1000)
        modes = {
            "qdq_u8s8": dict(quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                             weight_type=QuantType.QInt8),
            "qdq_s8s8_sym": dict(quant_format=QuantFormat.QDQ,
                                 activation_type=QuantType.QInt8,
                                 weight_type=QuantType.QInt8,
                                 extra_options={"ActivationSymmetric": True,
                                                "WeightSymmetric": True}),
            "qdq_u8s8_perchannel": dict(quant_format=QuantFormat.QDQ, per_channel=True,
                                        activation_type=QuantType.QUInt8,
                                        weight_type=QuantType.QInt8),
            "qop_u8s8": dict(quant_format=QuantFormat.QOperator,
                             activation_type=QuantType.QUInt8,
                             weight_type=QuantType.QInt8),
        }
        with tempfile.TemporaryDirectory() as td:
            pre = Path(td) / "pre.onnx"
            quant_pre_process(str(src), str(pre))
            for mode, kw in modes.items():
                path = HERE / f"{name}.ts_op13.{mode}.onnx"
                quantize_static(str(pre), str(path), Reader("input", calib), **kw)
                err = err_fq = 0.0
                for s, r in zip(samples, ref):
                    got = ort_run(path, s)
                    assert got.shape == r.shape and np.isfinite(got).all(), path.name
                    err = max(err, float(np.abs(got - r).max()))
                    fq = ort_run(path, s, optimize=False)
                    err_fq = max(err_fq, float(np.abs(fq - r).max()))
                q = {"format": "QDQ" if kw["quant_format"] == QuantFormat.QDQ else "QOperator",
                     "activation_type": kw["activation_type"].name,
                     "weight_type": kw["weight_type"].name,
                     "per_channel": kw.get("per_channel", False),
                     "symmetric_activations": bool(kw.get("extra_options", {})
                                                   .get("ActivationSymmetric", False)),
                     "calibration": "MinMax, 16 seeded standard-normal inputs",
                     "preprocessed": "quant_pre_process (shape inference + ORT optimizer)",
                     "mode": mode}
                manifest.append(describe(
                    path, source_net=name, exporter="torchscript", opset=13,
                    torch_version=torch.__version__, dynamic_batch=False,
                    quantization=q, source_file=src.name, max_abs_err_vs_torch=err,
                    max_abs_err_vs_torch_fakequant=err_fq))
                print(f"{path.name}: ok (max |quant - torch| = {err:.3f}, "
                      f"fake-quant {err_fq:.3f})")

    np.savez_compressed(HERE / "inputs.npz", **npz)
    (HERE / "manifest.json").write_text(json.dumps(
        {"generator": "make_models.py", "torch_version": torch.__version__,
         "onnx_version": onnx.__version__, "onnxruntime_version": ort.__version__,
         "seed": SEED,
         "note": "max_abs_err_* are over the 4 inputs in inputs.npz against torch's float "
                 "output; for quantized files max_abs_err_vs_torch is onnxruntime with its "
                 "default optimizations on the generating machine's CPU (integer kernels, "
                 "CPU-dependent), max_abs_err_vs_torch_fakequant with ORT_DISABLE_ALL",
         "inputs_npz": "per net NAME: float32 (4, 1, C, H, W) inputs; NAME__torch_out: "
                       "torch's float outputs for them, (4, 1, 10)",
         "files": manifest}, indent=1) + "\n")
    total = sum(p.stat().st_size for p in HERE.iterdir() if p.is_file())
    assert total <= MAX_FOLDER, f"folder is {total} bytes > 8 MiB"
    print(f"{len(manifest)} models, folder {total} bytes")


if __name__ == "__main__":
    sys.exit(main())
