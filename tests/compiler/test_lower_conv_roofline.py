"""The 1x1-conv lowerings that bring ResNet-18's C4, C7 and C10 to 0.90 of their bound on
the REQ-engine core (bench/RESULTS.md "1×1 convs toward the roofline"): inputs
placed by tile, every tile in one-block steps, the first step's weights in groups of
output blocks, the next step's weights prefetched, the last steps streamed per output
block (as many as cover the output's write beats), the output blocks of a one-tile conv
split over the two accumulator banks.

Oracle: numpy integer convolution (fsim, pynq-sized layers whose trace statistics show
each lowering was used).  The same lowerings at tiny's sizes run on the Verilated tiny
engine core in tests/runtime/test_req_engine.py (``test_roofline_lowerings_on_the_engine``).
"""

from __future__ import annotations


from _lower_util import conv_case
from vtaforge.hw.config import preset

ENG = preset("pynq").replace(ALU_REQUANT=True, REQ_ENGINE=True)


_conv = conv_case


def test_c10_shape_split_banks_groups_and_two_streamed_steps():
    """256 -> 512 channels, 1x1 stride 2 on 14x14 (ResNet-18 C10): one tile whose output
    blocks are split over the banks, a first step in 4 weight groups, 2 streamed steps."""
    st = _conv(ENG, 256, 512, 14, 1, 2)
    assert st["bank_split"] and st["stream_steps"] == 2 and st["first_step_groups"] == 4


def test_c7_shape_inputs_by_tile():
    """128 -> 256, 1x1 stride 2 on 28x28 (C7): inputs by tile, 2 weight groups."""
    st = _conv(ENG, 128, 256, 28, 1, 2)
    assert st["inp_by_tile"] and st["first_step_groups"] == 2 and not st["bank_split"]
    assert st["tiles"] > 1 and st["steps"] == st["tiles"] * 8     # one block per step


def test_3x3_on_the_same_lowerings():
    """A padded 3x3 conv (one-block steps in every tile, inputs by tile, the streamed last
    step with kh*kw micro-ops per entry) is exact too."""
    st = _conv(ENG, 64, 64, 14, 3, 1)
    assert st["inp_by_tile"] and st["stream_steps"] >= 1
