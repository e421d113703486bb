"""Token-queue depth (issue 22 item 3): every legal ``TOKEN_QUEUE_DEPTH`` runs compiled models.

``vtaforge compile`` accepted configs with one- or two-token queues and ``vtaforge run``
then refused the result ("the program cannot run with TOKEN_QUEUE_DEPTH = 1 ...").  Two
causes, two fixes, each with a case below that failed before it:

- the builder: an instruction that pops one queue and pushes another (a one-instruction
  GEMM step of a double-buffered conv, and the one-LOAD step feeding it) tied load and
  compute together; the launch is now retried with those pushes on NOPs
  (:func:`~vtaforge.runtime.launch.split_pushes`).  ResNet-18's 7x7 stem conv at pynq.
- the lowering: inputs placed by tile (``steps per tile`` compute->load tokens
  outstanding) and four ACC regions (four store->compute) need deeper queues in any
  order; a conv whose trace does not fit (:func:`~vtaforge.runtime.artifact.token_fault`)
  is lowered again without them.  MobileNet at tiny; a REQ-engine core at batch2.

Outputs are compared with the integer reference (``run_quantized``), never with another
run of the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest

from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.errors import CompileError
from vtaforge.compiler.lower_common import LoweredOp, fit_queues
from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split
from vtaforge.compiler.reference import run_quantized
from vtaforge.hw.config import MemType, preset
from vtaforge.hw.isa import Insn, Module, Opcode
from vtaforge.runtime.artifact import TraceBuilder, token_fault
from vtaforge.runtime.kernels import BuilderError
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice
from vtaforge.runtime.launch import capacity_order, split_pushes

L, C, S = Module.LOAD, Module.COMPUTE, Module.STORE
INP, UOP = int(MemType.INP), int(MemType.UOP)


# ------------------------------------------------------------------ builder: split pushes
def _tied_pipeline():
    """Two INP regions, one instruction per step on each side: load step ``s`` pops the
    credit of step ``s - 2`` and pushes its data token on one LOAD; compute's one GEMM per
    step pops that token and pushes the credit."""
    insns = []
    for s in range(4):
        insns.append(Insn(Opcode.LOAD, memory_type=INP, x_size=1, y_size=1, x_stride=1,
                          pop_next=int(s >= 2), push_next=1))
    for s in range(4):
        insns.append(Insn(Opcode.GEMM, pop_prev=1, push_prev=1))
    insns += [Insn(Opcode.LOAD, memory_type=INP, pop_next=1),
              Insn(Opcode.LOAD, memory_type=INP, pop_next=1),
              Insn(Opcode.FINISH)]
    return insns


def test_split_pushes_unties_a_one_instruction_pipeline():
    insns = _tied_pipeline()
    capacity_order(insns, 2)            # two-token queues: some order fits
    with pytest.raises(BuilderError, match=r"TOKEN_QUEUE_DEPTH = 1"):
        capacity_order(insns, 1)
    out, where = split_pushes(insns)
    order = capacity_order(out, 1)
    assert order is not None and sorted(order) == list(range(len(out)))
    # each GEMM keeps its pop; its push moved onto the compute NOP right behind it
    g = where[4]
    assert out[g].opcode == Opcode.GEMM and out[g].pop_prev and not out[g].push_prev
    nop = out[g + 1]
    assert (nop.opcode, nop.memory_type, nop.x_size, nop.push_prev) == (Opcode.LOAD, UOP, 0, 1)
    # an instruction with one push and no pop is kept as it is
    assert out[where[0]] == insns[0]


# ------------------------------------------------------------------ traces: token_fault
def _credits_trace(k: int):
    """Load announces ``k`` loads and compute frees ``k`` regions before either waits for
    the other's tokens: ``k`` outstanding in both l2g and g2l, in any order."""
    tb = TraceBuilder("t/credits")
    for _ in range(k):
        tb.dep_push(L, C)
        tb.dep_push(C, L)
    for _ in range(k):
        tb.dep_pop(L, C)
        tb.dep_pop(C, L)
    return tb.trace


def test_token_fault_names_the_queue_and_depth():
    tr = _credits_trace(3)
    assert token_fault(tr, 3) is None
    assert token_fault(tr, 2) == ("t/credits: the program needs more than 2 token(s) "
                                  "outstanding in token queue g2l, l2g (TOKEN_QUEUE_DEPTH = 2)")
    with pytest.raises(CompileError, match=r"^t/credits: .* token queue g2l, l2g "
                                           r"\(TOKEN_QUEUE_DEPTH = 1\)$"):
        fit_queues(preset("tiny").replace(TOKEN_QUEUE_DEPTH=1), LoweredOp(tr, {}, {}))
    # a pop nothing pushes is no capacity question
    tb = TraceBuilder("t/unbalanced")
    tb.dep_pop(S, C)
    assert "more often than it pushes" in token_fault(tb.trace, 4)


# ------------------------------------------------------------------ compiled models
def _run_equal(cm, x, dev=None):
    out = Executor(cm, dev or FsimDevice(cm.config)).run(x)
    ref = run_quantized(cm.qgraph, {cm.inputs[0]: x})
    k = cm.outputs[0]
    np.testing.assert_array_equal(out[k], ref[k])


@pytest.fixture(scope="module")
def digits():
    xtr, _, xte, _ = load_digits_split()
    return xtr[:200], xte[:3]


@pytest.mark.parametrize("depth", [1, 2, 255])
def test_digits_at_every_depth(digits, depth):
    cfg = preset("pynq").replace(TOKEN_QUEUE_DEPTH=depth)
    cm = compile_model(str(DIGITS_ONNX), digits[0], cfg)
    assert sum(s.target == "vta" for s in cm.steps) == 6      # conv, pool, conv, ... fc2
    _run_equal(cm, digits[1])


def _zoo_case(model: str):
    from vtaforge.compiler import zoo

    if model == "resnet18":
        return zoo.resnet18(32, num_classes=10)
    return zoo.mobilenet_v1(32, num_classes=10, alpha=0.25)


#: (preset, extra config keys, depth, model): each failed before this change, at run
#: ("cannot run with TOKEN_QUEUE_DEPTH") or as a conv the compiler left on the CPU
CASES = [
    ("pynq", {}, 1, "resnet18"),            # builder: the stem conv's tied steps
    ("tiny", {}, 1, "mobilenet"),           # lowering: inputs placed by tile
    ("tiny", {}, 2, "mobilenet"),
    ("batch2", {"ALU_REQUANT": True, "REQ_ENGINE": True}, 1, "mobilenet"),  # 4 ACC regions
]


@pytest.mark.parametrize("name,extra,depth,model", CASES,
                         ids=[f"{c[0]}{'+engine' if c[1] else ''}-q{c[2]}-{c[3]}" for c in CASES])
def test_zoo_models_on_shallow_queues(name, extra, depth, model):
    cfg = preset(name).replace(TOKEN_QUEUE_DEPTH=depth, **extra)
    x = np.random.default_rng(0).random((1, 3, 32, 32)).astype(np.float32)
    cm = compile_model(_zoo_case(model), x, cfg)
    deep = compile_model(_zoo_case(model), x, cfg.replace(TOKEN_QUEUE_DEPTH=255))
    # the same steps on VTA as with deep queues (no conv pushed to the CPU by its tokens)
    assert [s.target for s in cm.steps] == [s.target for s in deep.steps]
    for s in cm.steps:
        if s.trace is not None:
            assert token_fault(s.trace, depth) is None, s.name
    _run_equal(cm, x)


def test_only_the_convs_that_do_not_fit_are_lowered_again():
    """At depth 2 (MobileNet, tiny) a conv whose default program fits keeps it, op for op;
    one that does not (inputs by tile) is lowered again with inputs by step."""
    x = np.random.default_rng(0).random((1, 3, 32, 32)).astype(np.float32)

    def traces(depth):
        cm = compile_model(_zoo_case("mobilenet"), x,
                           preset("tiny").replace(TOKEN_QUEUE_DEPTH=depth))
        return {s.name: s.trace for s in cm.steps if s.trace is not None}
    deep, shallow = traces(255), traces(2)
    assert deep.keys() == shallow.keys()
    redone = [n for n, t in deep.items() if token_fault(t, 2) is not None]
    assert redone and all(deep[n].stats["inp_by_tile"] for n in redone)
    for n, t in deep.items():
        if n in redone:
            assert not shallow[n].stats["inp_by_tile"] and token_fault(shallow[n], 2) is None
        else:
            assert shallow[n].ops == t.ops, n


@pytest.mark.rtl
def test_digits_on_rtl_with_one_entry_queues(digits, rtl_models):
    """The Verilated core with one-token, one-instruction queues (the model the fault
    suite builds) runs the compiled digits CNN bit-exactly."""
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    cfg = preset("tiny").replace(TOKEN_QUEUE_DEPTH=1, INSN_QUEUE_DEPTH=1)
    cm = compile_model(str(DIGITS_ONNX), digits[0], cfg)
    with rtl.RtlDevice(cfg, 16 << 20, model=rtl_models(cfg), progress=False) as dev:
        _run_equal(cm, digits[1][:1], dev)
