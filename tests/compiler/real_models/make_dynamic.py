"""Write ``dynhw_cnn.ts_op17_dynhw.onnx``: a small CNN exported by PyTorch with dynamic
batch, height and width (``dynamic_axes={'input': {0: 'N', 2: 'H', 3: 'W'}}``), for the
symbolic-H/W tests (``tests/compiler/test_dynamic_shapes.py``).

A sibling of ``make_models.py``; run it offline with the separate torch venv (the
project's own venv must not have torch; CI never installs it):

    /work/torchenv/bin/python tests/compiler/real_models/make_dynamic.py

Seeded: reruns with the same versions give the same file.  The export is checked with
``onnx.checker`` and against torch with onnxruntime at four sizes (odd ones and ones that
are not a multiple of the strides included).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn

HERE = Path(__file__).resolve().parent
OUT = HERE / "dynhw_cnn.ts_op17_dynhw.onnx"
SEED = 20261201
SIZES = [(16, 16), (9, 13), (17, 23), (12, 20)]


class DynHWNet(nn.Module):
    """conv3x3-BN-ReLU (3->8), conv3x3/2-BN-ReLU (8->16), a residual conv3x3-BN + add +
    ReLU, maxpool 3/2 pad 1, adaptive avgpool 1, flatten, linear 16->10."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU())
        self.down = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.res = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16))
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.down(self.stem(x))
        x = self.relu(x + self.res(x))
        x = self.gap(self.pool(x))
        return self.fc(torch.flatten(x, 1))


def _randomize_bn(net: nn.Module, g: torch.Generator) -> None:
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(c, generator=g) * 0.5 + 0.5)
            m.weight.data.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(c, generator=g) * 0.1)


def main() -> None:
    warnings.filterwarnings("ignore")
    torch.manual_seed(SEED)
    g = torch.Generator().manual_seed(SEED)
    net = DynHWNet()
    _randomize_bn(net, g)
    net.eval()
    x = torch.randn(1, 3, 16, 16, generator=g)
    torch.onnx.export(net, (x,), str(OUT), dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["output"], do_constant_folding=True,
                      dynamic_axes={"input": {0: "N", 2: "H", 3: "W"}, "output": {0: "N"}})
    m = onnx.load(str(OUT))
    onnx.checker.check_model(m, full_check=True)
    sess = ort.InferenceSession(str(OUT), providers=["CPUExecutionProvider"])
    for h, w in SIZES:
        xi = torch.randn(2, 3, h, w, generator=g)
        with torch.no_grad():
            want = net(xi).numpy()
        got = sess.run(None, {"input": xi.numpy()})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    print(f"wrote {OUT.name} ({OUT.stat().st_size} bytes); input "
          f"{[d.dim_param or d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]}")


if __name__ == "__main__":
    main()
