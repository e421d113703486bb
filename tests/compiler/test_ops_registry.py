"""The op registry is complete and consistent, and it is the only way ops are dispatched.

* every facet is present where it is needed: no op can be placed on VTA without a
  lowering, an integer reference and an accumulator bound; every requantizing op has its
  integer rules (``check``); every quantized op has a reference and a runtime CPU kernel;
  every float op has a quantizer rule and a kernel the float executor runs; every op a
  quantizer rule produces is registered with both;
* the dispatchers hold no per-op if-chains, and the compiler's modules import each other
  at the top only, without a cycle (the registry imports the facet modules, the
  dispatchers import the registry).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from _onnx_util import make_model, rand
import program_identity as pi
from vtaforge.compiler import import_onnx, partition, quantize
from vtaforge.compiler.compile import lower_node
from vtaforge.compiler.errors import CompileError
from vtaforge.compiler.ir import LAYOUT_OPS, OPS, Graph, Node, TensorType
from vtaforge.compiler.ops import REGISTRY
from vtaforge.compiler.options import LowerOptions
from vtaforge.compiler.quant_rules import QuantRules
from vtaforge.hw.config import preset
from vtaforge.runtime.cpu_float import REAL_OPS
from vtaforge.runtime.cpu_ops import CPU_KERNELS

ir = importlib.import_module("vtaforge.compiler.ir")
reference = importlib.import_module("vtaforge.compiler.reference")
partition_mod = importlib.import_module("vtaforge.compiler.partition")
compile_mod = importlib.import_module("vtaforge.compiler.compile")
quantize_mod = importlib.import_module("vtaforge.compiler.quantize")

COMPILER = Path(partition_mod.__file__).resolve().parent
#: modules that look ops up in the registry (they must import ``ops``; it must not reach them)
DISPATCHERS = {"partition", "compile", "reference", "quantize"}


def test_every_ir_op_has_one_entry():
    assert set(REGISTRY) == set(OPS)
    assert all(d.name == k for k, d in REGISTRY.items())


def _check_vta(name, d):
    if d.vta is None:
        if "quantized" in d.spec.kinds and d.cpu not in ("real", "onnx"):
            assert d.cpu_reason, f"{name}: runs on the CPU without a stated reason"
        return
    assert d.lower is not None, f"{name}: a VTA predicate without a lowering"
    assert d.reference is not None, f"{name}: a VTA op without an integer reference"
    assert d.acc_bound is not None, f"{name}: a VTA op without an accumulator bound"
    assert d.capability.startswith("vta: "), f"{name}: a VTA op missing from the capability table"


def _check_quantized(name, d):
    if "quantized" not in d.spec.kinds or name in REAL_OPS or name == "onnx":
        return
    assert d.reference is not None, f"{name}: no integer reference"
    assert name in CPU_KERNELS, f"{name}: no runtime CPU kernel"
    if "shift" in d.spec.attrs or "divisor" in d.spec.attrs:   # a requantize
        assert d.check is not None, f"{name}: requantize attributes without integer rules"
        assert d.acc_bound is not None, f"{name}: a requantize without an accumulator bound"


def _check_float(name, d):
    if "float" not in d.spec.kinds or name == "onnx":
        return
    assert d.quantize is not None, f"{name}: a float op without a quantizer rule"
    assert name in REAL_OPS or d.reference is not None, f"{name}: the float executor cannot run it"
    if d.cpu == "real":
        assert name in REAL_OPS, f"{name}: declared real-valued but runtime/cpu_float has no kernel"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_entry_is_consistent(name):
    d = REGISTRY[name]
    _check_vta(name, d)
    _check_quantized(name, d)
    _check_float(name, d)
    if d.cpu == "int":
        assert name in CPU_KERNELS, f"{name}: declared an integer CPU op but runtime/cpu_ops lacks it"
    if d.quantize is not None:
        rule = d.quantize
        assert callable(rule), f"{name}: quantizer rule is not a function"
        assert rule.__qualname__.startswith(f"{QuantRules.__name__}.") or \
            rule.__module__ == "vtaforge.compiler.ops", f"{name}: a rule neither of QuantRules nor beside its entry"
        for p in d.produces:   # a float kernel (the op) never lacks the integer one it becomes
            assert p in REGISTRY, f"{name} produces unregistered {p}"
            assert REGISTRY[p].reference is not None or p == "softmax", f"{name} -> {p}: no reference"
            assert p in CPU_KERNELS, f"{name} -> {p}: no CPU kernel"


def test_layout_ops_run_in_both_executors():
    """A layout op's reference moves data of any dtype: the float executor and the integer
    oracle run the same kernel and agree."""
    assert LAYOUT_OPS <= {n for n, d in REGISTRY.items() if d.reference is not None}
    attrs = {"flatten": {"axis": 1}, "reshape": {"shape": (0, -1)}, "transpose": {"perm": (0, 2, 3, 1)},
             "concat": {"axis": 1}, "upsample": {"scales": (2, 1)}, "pad": {"pads": (1, 0, 0, 2)}}
    x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    for op in sorted(LAYOUT_OPS):
        ins = [x, x] if op == "concat" else [x]
        n = Node(op, op, [f"i{k}" for k in range(len(ins))], ["y"], attrs[op])
        (yf,) = reference._float_node(n, [v.astype(np.float32) for v in ins], Graph(name="g"))
        yq = reference.run_node(n, [v.astype(np.int8) for v in ins], Graph(name="g", kind="quantized"))[0]
        assert yq.dtype == np.int8 and np.array_equal(yf, yq.astype(np.float32)), op


def _models():
    """Small models that reach every VTA-capable quantized op."""
    conv = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("AveragePool", ["p"], ["a"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("Conv", ["a", "w2"], ["a2"]),
            helper.make_node("Add", ["a", "a2"], ["s"]),
            helper.make_node("Max", ["s", "a"], ["mx"]),
            helper.make_node("Min", ["mx", "cm"], ["mn"]),
            helper.make_node("Clip", ["mn", "lo", "hi"], ["k"]),
            helper.make_node("Flatten", ["k"], ["f"]),
            helper.make_node("Gemm", ["f", "fw"], ["y"], transB=1)]
    return make_model(conv, [("x", ["N", 3, 8, 8])], [("y", ["N", 5])],
                      {"w": rand(8, 3, 3, 3, seed=1, scale=0.3), "w2": rand(8, 8, 1, 1, seed=2, scale=0.3),
                       "fw": rand(5, 32, seed=3, scale=0.3), "cm": rand(8, 1, 1, seed=5),
                       "lo": np.array(-1.0, np.float32), "hi": np.array(2.0, np.float32)})


@pytest.mark.parametrize("cfg", ["pynq", "tiny", "batch2", "alu_mul"])
def test_every_vta_placement_lowers(cfg):
    """Whatever the partitioner places on VTA, for any of these configs, has a lowering
    that accepts it (the issue's 'placed on VTA without a lowering' class of bug)."""
    c = preset("pynq").replace(ALU_MUL=True) if cfg == "alu_mul" else preset(cfg)
    q = quantize(import_onnx(_models()), rand(4, 3, 8, 8, seed=4))
    p = partition(q, c)
    placed = [n for n in q.nodes if p.target(n.name) == "vta"]
    assert {n.op for n in placed} >= {"qconv2d", "qdense", "qmax_pool", "qavg_pool", "qadd", "qmax", "qmin"}
    for i, n in zip(itertools.count(), placed):
        lower_node(c, q, n, f"t/{i}")


def test_acc_bound_dispatches_through_the_entry():
    q = quantize(import_onnx(_models()), rand(4, 3, 8, 8, seed=4))
    for n in q.nodes:
        d = REGISTRY[n.op]
        if d.acc_bound is None:
            with pytest.raises(CompileError, match="no accumulator bound"):
                partition_mod.acc_bound(n, q)
        else:
            assert partition_mod.acc_bound(n, q) == d.acc_bound(n, q) > 0
    conv = next(n for n in q.nodes if n.op == "qconv2d")
    k = int(np.prod(q.types[conv.inputs[1]].shape[1:]))
    b = int(np.abs(q.constants[conv.inputs[2]].astype(np.int64)).max())
    assert partition_mod.acc_bound(conv, q) == k * 128 * 128 + b


def test_macs_dispatch_through_the_entry():
    """``node_macs`` reads the ``macs`` facet: conv ``Cout*Ho*Wo * Cin*kh*kw`` (8*8*8 * 3*3*3,
    then 8*2*2 * 8*1*1), dense ``M * K`` (5 * 32), in the float graph and the quantized one;
    0 for every other op."""
    fg = import_onnx(_models())
    q = quantize(fg, rand(4, 3, 8, 8, seed=4))
    for g, ops in ((fg, ("conv2d", "dense")), (q, ("qconv2d", "qdense"))):
        macs = [(n.op, partition_mod.node_macs(n, g)) for n in g.nodes if partition_mod.node_macs(n, g)]
        assert macs == [(ops[0], 13824), (ops[0], 256), (ops[1], 160)]
        assert all((REGISTRY[n.op].macs is None) == (n.op not in ops) for n in g.nodes)


def test_weights_and_int4_facets():
    """The width check finds the weights at the entry's ``weights`` position (conv/dense)
    and an op's int4 form through its ``int4`` facet (``qadd`` only)."""
    assert {n for n, d in REGISTRY.items() if d.weights is not None} == {"conv2d", "dense", "qconv2d", "qdense"}
    assert {n for n, d in REGISTRY.items() if d.int4 is not None} == {"qadd"}


def test_bands_facet_is_the_row_band_lowering():
    """The ``bands`` facet of ``qconv2d`` gives exactly the row-band variants
    ``compile._bands`` gives (same programs), for a conv whose input the host packs."""
    q = quantize(import_onnx(_models()), rand(4, 3, 8, 8, seed=4))
    c = preset("pynq")
    assert {n for n, d in REGISTRY.items() if d.bands is not None} == {"qconv2d"}
    for n in (n for n in q.nodes if n.op == "qconv2d"):
        lo, _ = lower_node(c, q, n, "t/c")
        got = REGISTRY[n.op].bands(c, q, n, lo, "t/c", {}, LowerOptions())
        want = compile_mod._bands(c, q, n, lo, "t/c", {})
        def key(bands):
            return [(b.rows, pi.digest(trace=b.trace), b.tail and pi.digest(trace=b.tail)) for b in bands]
        assert got and key(got) == key(want)
        assert REGISTRY[n.op].bands(c, q, n, lo, "t/c", {n.inputs[0]: lo.layouts["x"]},
                                    LowerOptions()) == []


def test_check_facet_runs_in_validate():
    """``validate`` reaches an op's integer rules through its spec: a ``qrequant`` whose
    round does not match its shift is refused, one with a clip outside int8 too."""
    g = Graph(name="g", kind="quantized")
    g.inputs = ["x"]
    g.types["x"] = TensorType("int8", (1, 4), -3)
    attrs = {"shift": 1, "round": 0, "mult": 1, "clip_lo": -128, "clip_hi": 127, "exp_out": -2}
    g.nodes = [Node("r", "qrequant", ["x"], ["y"], attrs)]
    g.types["y"] = TensorType("int8", (1, 4), -2)
    g.outputs = ["y"]
    assert REGISTRY["qrequant"].check is OPS["qrequant"].check is not None
    with pytest.raises(CompileError, match="round 0 does not match shift 1"):
        ir.validate(g)
    g.nodes[0].attrs.update(round=1, clip_hi=300)
    with pytest.raises(CompileError, match=r"clip \[-128, 300\] outside the int8 range"):
        ir.validate(g)
    g.nodes[0].attrs.update(clip_hi=127)
    ir.validate(g)


@pytest.mark.parametrize("fn", [partition_mod.acc_bound, partition_mod.vta_support,
                                partition_mod.capability_table, partition_mod.cpu_reason,
                                partition_mod.node_macs, partition_mod._width_mismatch,
                                ir._check_quant_node, reference._float_node, reference._q_node,
                                reference.run_node, compile_mod.lower_node, quantize_mod._Quantizer.run],
                         ids=lambda f: f.__qualname__)
def test_dispatchers_have_no_op_chains(fn):
    """A dispatcher looks the op up in the registry; it does not test op names (beyond the
    ``onnx`` node, which is not an IR op with facets of its own)."""
    tree = ast.parse(_dedent(fn))
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and \
                node.left.attr == "op":
            consts = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant)]
            assert all(v == "onnx" for v in consts), \
                f"{fn.__qualname__} tests op names {consts}: dispatch through the registry"


def _dedent(fn) -> str:
    src = inspect.getsource(fn)
    pad = len(src) - len(src.lstrip())
    return "\n".join(line[pad:] for line in src.splitlines())


def _module_imports(path: Path) -> tuple[set[str], list[tuple[int, str]]]:
    """``(modules of compiler/ imported at module level, [(line, module)] imported inside a
    function)``; ``if TYPE_CHECKING:`` blocks (annotations only) are skipped."""
    tree = ast.parse(path.read_text())
    top: set[str] = set()
    local: list[tuple[int, str]] = []

    def target(n: ast.ImportFrom) -> list[str]:
        if n.level == 1:        # from .x import y / from . import x
            return [n.module.split(".")[0]] if n.module else [a.name for a in n.names]
        if n.level == 0 and (n.module or "").startswith("vtaforge.compiler"):
            rest = n.module.split(".")[2:]
            return rest[:1] if rest else [a.name for a in n.names]
        return []

    def walk(node, in_func: bool):
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, ast.If) and isinstance(ch.test, ast.Name) and ch.test.id == "TYPE_CHECKING":
                continue
            if isinstance(ch, ast.ImportFrom):
                for m in target(ch):
                    if (COMPILER / f"{m}.py").exists() or (COMPILER / m).is_dir():
                        (local.append((ch.lineno, m)) if in_func else top.add(m))
            walk(ch, in_func or isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(tree, False)
    return top, local


def _graph() -> dict[str, set[str]]:
    return {p.stem: _module_imports(p)[0] for p in sorted(COMPILER.glob("*.py"))}


def test_no_function_local_imports_between_compiler_modules():
    """Op dispatch (and everything else) imports compiler modules at the top: a function-
    local import is how a cycle hides."""
    bad = [f"compiler/{p.name}:{line} imports .{m} inside a function"
           for p in sorted(COMPILER.glob("*.py")) for line, m in _module_imports(p)[1]]
    assert not bad, "\n".join(bad)


def test_compiler_imports_are_acyclic():
    g = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str):
        state[m] = 1
        stack.append(m)
        for n in sorted(g.get(m, ())):
            if n == "__init__" or n not in g:
                continue
            assert state.get(n) != 1, "import cycle: " + " -> ".join(stack[stack.index(n):] + [n])
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in g:
        if m not in state:
            visit(m)


def test_registry_sits_below_its_dispatchers():
    """``ops`` imports the facet modules only; every dispatcher imports ``ops``."""
    g = _graph()
    seen, todo = set(), ["ops"]
    while todo:
        m = todo.pop()
        for n in g.get(m, ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    assert not seen & DISPATCHERS, f"ops reaches the dispatchers {sorted(seen & DISPATCHERS)}"
    for m in sorted(DISPATCHERS):
        assert "ops" in g[m], f"{m} does not import the registry"
