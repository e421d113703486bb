"""Tests for ``vtaforge.hw.isa``: golden encodings at ``pynq`` (bit positions written by hand
from vta-anchor.md §2.2 and §3.1, independent of ``hw.isa``'s tables), layout rules for any
config, encode/decode round trips (single instructions and whole programs), error messages
and the disassembler (field fault BR-15).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from vtaforge.hw.config import RANGES, TARGETS, ConfigError, MemType, VTAConfig, preset
from vtaforge.hw.isa import (
    INSN_BYTES,
    INSN_FIELDS,
    AluOp,
    Insn,
    ISAError,
    Module,
    Opcode,
    decode_insn,
    decode_program,
    decode_uops,
    disassemble,
    encode_insn,
    encode_program,
    encode_uops,
    insn_module,
    isa_layout,
)

PYNQ = preset("pynq")


def _word(*fields: tuple[int, int, int]) -> int:
    """OR together (value, lsb, width) with explicit shifts; checks the value fits."""
    w = 0
    for value, lsb, width in fields:
        assert 0 <= value < (1 << width)
        w |= value << lsb
    return w


def _bytes(word: int) -> bytes:
    return word.to_bytes(16, "little")


# --------------------------------------------------------------------------- golden values
def test_golden_load_every_field_distinct_and_max():
    insn = Insn(opcode=Opcode.LOAD, pop_prev=0, pop_next=1, push_prev=0, push_next=1,
                memory_type=MemType.INP, sram_base=0xFFFF, dram_base=0xDEADBEEF,
                y_size=0xFFFF, x_size=0x1234, x_stride=0xFFFE,
                y_pad_0=15, y_pad_1=7, x_pad_0=3, x_pad_1=9)
    expected = _word(
        (0, 0, 3), (0, 3, 1), (1, 4, 1), (0, 5, 1), (1, 6, 1),
        (2, 7, 3), (0xFFFF, 10, 16), (0xDEADBEEF, 26, 32),
        (0xFFFF, 64, 16), (0x1234, 80, 16), (0xFFFE, 96, 16),
        (15, 112, 4), (7, 116, 4), (3, 120, 4), (9, 124, 4))
    assert encode_insn(PYNQ, insn) == _bytes(expected)
    assert decode_insn(PYNQ, _bytes(expected)) == insn
    # bits 58..63 are the unused gap of the memory format
    assert (expected >> 58) & 0x3F == 0


def test_golden_store():
    insn = Insn(opcode=Opcode.STORE, pop_prev=1, push_prev=1, memory_type=MemType.OUT,
                sram_base=2047, dram_base=0x00ABCDEF, y_size=3, x_size=5, x_stride=8)
    expected = _word(
        (1, 0, 3), (1, 3, 1), (1, 5, 1), (4, 7, 3), (2047, 10, 16), (0x00ABCDEF, 26, 32),
        (3, 64, 16), (5, 80, 16), (8, 96, 16))
    assert encode_insn(PYNQ, insn) == _bytes(expected)
    assert decode_insn(PYNQ, _bytes(expected)) == insn


def test_golden_gemm_every_field_distinct_and_max():
    insn = Insn(opcode=Opcode.GEMM, pop_prev=1, pop_next=0, push_prev=1, push_next=0,
                reset=1, uop_bgn=8191, uop_end=8192, iter_out=16383, iter_in=12345,
                dst_factor_out=2047, dst_factor_in=1000, src_factor_out=1234,
                src_factor_in=2046, wgt_factor_out=1023, wgt_factor_in=511)
    expected = _word(
        (2, 0, 3), (1, 3, 1), (0, 4, 1), (1, 5, 1), (0, 6, 1),
        (1, 7, 1), (8191, 8, 13), (8192, 21, 14), (16383, 35, 14), (12345, 49, 14),
        (2047, 64, 11), (1000, 75, 11), (1234, 86, 11), (2046, 97, 11),
        (1023, 108, 10), (511, 118, 10))
    assert encode_insn(PYNQ, insn) == _bytes(expected)
    assert decode_insn(PYNQ, _bytes(expected)) == insn
    assert (expected >> 63) & 1 == 0  # the one unused bit


@pytest.mark.parametrize("imm", [-1, -2, -32768, 32767, -300])
def test_golden_alu_negative_imm(imm):
    insn = Insn(opcode=Opcode.ALU, pop_next=1, push_next=1, reset=0, uop_bgn=17,
                uop_end=4097, iter_out=3, iter_in=16383, dst_factor_out=1, dst_factor_in=2047,
                src_factor_out=5, src_factor_in=1024, alu_opcode=AluOp.SHR, use_imm=1, imm=imm)
    expected = _word(
        (4, 0, 3), (0, 3, 1), (1, 4, 1), (0, 5, 1), (1, 6, 1),
        (0, 7, 1), (17, 8, 13), (4097, 21, 14), (3, 35, 14), (16383, 49, 14),
        (1, 64, 11), (2047, 75, 11), (5, 86, 11), (1024, 97, 11),
        (3, 108, 3), (1, 111, 1), (imm & 0xFFFF, 112, 16))
    assert encode_insn(PYNQ, insn) == _bytes(expected)
    d = decode_insn(PYNQ, _bytes(expected))
    assert d == insn and d.imm == imm


@pytest.mark.parametrize("flags", [(1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1),
                                   (1, 1, 1, 1)])
def test_golden_finish_with_flags(flags):
    pp, pn, up, un = flags
    insn = Insn(opcode=Opcode.FINISH, pop_prev=pp, pop_next=pn, push_prev=up, push_next=un)
    expected = _word((3, 0, 3), (pp, 3, 1), (pn, 4, 1), (up, 5, 1), (un, 6, 1))
    assert encode_insn(PYNQ, insn) == _bytes(expected)
    assert decode_insn(PYNQ, _bytes(expected)) == insn


def test_finish_ignores_other_fields_and_decodes_them_zero():
    insn = Insn(opcode=Opcode.FINISH, push_next=1, x_size=5, uop_end=3, imm=-1)
    assert encode_insn(PYNQ, insn) == _bytes(_word((3, 0, 3), (1, 6, 1)))
    assert decode_insn(PYNQ, encode_insn(PYNQ, insn)) == Insn(opcode=Opcode.FINISH, push_next=1)


def test_golden_uops():
    dst = [0, 2047, 5, 1]
    src = [0, 1, 2047, 1000]
    wgt = [0, 1023, 7, 512]
    expected = [_word((d, 0, 11), (s, 11, 11), (w, 22, 10)) for d, s, w in zip(dst, src, wgt)]
    got = encode_uops(PYNQ, dst, src, wgt)
    assert got.dtype == np.uint32
    assert got.tolist() == expected
    assert expected[1] == 0xFFC00FFF  # wgt max and dst max, src 1
    dec = decode_uops(PYNQ, got)
    assert dec["dst"].tolist() == dst and dec["src"].tolist() == src and dec["wgt"].tolist() == wgt


def test_pynq_gemm_alu_use_127_of_128_bits():
    lay = isa_layout(PYNQ)
    assert lay.used_bits("gemm") == 127 and lay.used_bits("alu") == 127
    assert lay.used_bits("mem") == 7 + 3 + 16 + 32 + 16 * 3 + 4 * 4 == 122


# --------------------------------------------------------------------------- layout rules
def _expected_widths(cfg: VTAConfig) -> dict[str, dict[str, int]]:
    """Field widths from upstream's formulas (vta-anchor.md §1.2, §2.2, §3.1), computed here
    from the config keys, not from hw.config's derived properties."""
    inp_elem_log = cfg.LOG_BATCH + cfg.LOG_BLOCK_IN + cfg.LOG_INP_WIDTH - 3
    wgt_elem_log = cfg.LOG_BLOCK_OUT + cfg.LOG_BLOCK_IN + cfg.LOG_WGT_WIDTH - 3
    acc_elem_log = cfg.LOG_BATCH + cfg.LOG_BLOCK_OUT + cfg.LOG_ACC_WIDTH - 3
    uop = cfg.LOG_UOP_BUFF_SIZE - 2
    inp = cfg.LOG_INP_BUFF_SIZE - inp_elem_log
    wgt = cfg.LOG_WGT_BUFF_SIZE - wgt_elem_log
    acc = cfg.LOG_ACC_BUFF_SIZE - acc_elem_log
    hdr = {"opcode": 3, "pop_prev": 1, "pop_next": 1, "push_prev": 1, "push_next": 1}
    loop = {"reset": 1, "uop_bgn": uop, "uop_end": uop + 1, "iter_out": 14, "iter_in": 14}
    return {
        "mem": {**hdr, "memory_type": 3, "sram_base": 16, "dram_base": 32, "y_size": 16,
                "x_size": 16, "x_stride": 16, "y_pad_0": 4, "y_pad_1": 4, "x_pad_0": 4,
                "x_pad_1": 4},
        "gemm": {**hdr, **loop, "dst_factor_out": acc, "dst_factor_in": acc,
                 "src_factor_out": inp, "src_factor_in": inp, "wgt_factor_out": wgt,
                 "wgt_factor_in": wgt},
        "alu": {**hdr, **loop, "dst_factor_out": acc, "dst_factor_in": acc,
                "src_factor_out": acc, "src_factor_in": acc, "alu_opcode": 3, "use_imm": 1,
                "imm": 16},
        "finish": dict(hdr),
        "uop": {"dst": acc, "src": max(acc, inp), "wgt": wgt},
    }


def _check_layout(cfg: VTAConfig) -> None:
    lay = isa_layout(cfg)
    exp = _expected_widths(cfg)
    for fmt, fields in list(lay.formats().items()) + [("uop", lay.uop)]:
        word = 32 if fmt == "uop" else 64
        assert [f.name for f in fields] == list(exp[fmt]), fmt
        pos = 0
        for f in fields:
            assert f.width == exp[fmt][f.name], (fmt, f.name)
            # C bit-field rule: next free bit, or the next word if it does not fit
            if pos % word + f.width > word:
                pos += word - pos % word
            assert f.lsb == pos, (fmt, f.name)
            pos += f.width
        assert pos <= (32 if fmt == "uop" else 128)


def test_pynq_layout_matches_anchor():
    _check_layout(PYNQ)


# --------------------------------------------------------------------------- hypothesis
@st.composite
def configs(draw) -> VTAConfig:
    """Random valid configs: keys within RANGES, buffer sizes chosen around the element size
    so that most draws fit the ISA; draws that still raise ConfigError are rejected."""
    d: dict = {
        "TARGET": draw(st.sampled_from(sorted(TARGETS))),
        "LOG_INP_WIDTH": draw(st.integers(*RANGES["LOG_INP_WIDTH"])),
        "LOG_WGT_WIDTH": draw(st.integers(*RANGES["LOG_WGT_WIDTH"])),
        "LOG_ACC_WIDTH": draw(st.integers(*RANGES["LOG_ACC_WIDTH"])),
        "LOG_BATCH": draw(st.integers(0, 2)),
        "LOG_BLOCK_IN": draw(st.integers(1, 6)),
        "LOG_BLOCK_OUT": draw(st.integers(1, 6)),
        "ACC_8BIT": draw(st.booleans()),
        "ALU_MUL": draw(st.booleans()),
    }
    inp_e = d["LOG_BATCH"] + d["LOG_BLOCK_IN"] + d["LOG_INP_WIDTH"] - 3
    wgt_e = d["LOG_BLOCK_OUT"] + d["LOG_BLOCK_IN"] + d["LOG_WGT_WIDTH"] - 3
    acc_e = d["LOG_BATCH"] + d["LOG_BLOCK_OUT"] + d["LOG_ACC_WIDTH"] - 3
    for key, elem, hi_depth in (("LOG_UOP_BUFF_SIZE", 2, 13), ("LOG_INP_BUFF_SIZE", inp_e, 11),
                                ("LOG_WGT_BUFF_SIZE", wgt_e, 10), ("LOG_ACC_BUFF_SIZE", acc_e, 11)):
        lo, hi = RANGES[key]
        lo_depth = max(1, lo - elem)
        hi_d = min(hi_depth, hi - elem)
        assume(lo_depth <= hi_d)
        d[key] = elem + draw(st.integers(lo_depth, hi_d))
    try:
        return VTAConfig.from_dict(d)
    except ConfigError:
        assume(False)


def _field_values(draw, cfg: VTAConfig, opcode: int) -> Insn:
    fmt = isa_layout(cfg).format_of(opcode)
    vals = {}
    for f in fmt:
        if f.name == "opcode":
            vals[f.name] = opcode
        elif f.signed:
            vals[f.name] = draw(st.integers(-(1 << (f.width - 1)), (1 << (f.width - 1)) - 1))
        else:
            vals[f.name] = draw(st.integers(0, f.mask))
    return Insn(**vals)


@st.composite
def config_and_insns(draw, max_len: int = 12):
    cfg = draw(configs())
    n = draw(st.integers(1, max_len))
    ops = draw(st.lists(st.sampled_from(list(Opcode)), min_size=n, max_size=n))
    return cfg, [_field_values(draw, cfg, int(op)) for op in ops]


_SETTINGS = settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])


@_SETTINGS
@given(configs())
def test_layout_rules_any_config(cfg):
    _check_layout(cfg)


@_SETTINGS
@given(config_and_insns(max_len=1))
def test_single_insn_round_trip(ci):
    cfg, (insn,) = ci
    b = encode_insn(cfg, insn)
    assert len(b) == INSN_BYTES
    assert decode_insn(cfg, b) == insn
    # and through a plain dict
    assert encode_insn(cfg, insn.asdict()) == b


@_SETTINGS
@given(config_and_insns())
def test_program_round_trip_and_vectorised_consistency(ci):
    cfg, insns = ci
    prog = encode_program(cfg, insns)
    assert prog.dtype == np.uint8 and prog.shape == (len(insns), INSN_BYTES)
    for i, insn in enumerate(insns):
        assert bytes(prog[i]) == encode_insn(cfg, insn)
    cols = decode_program(cfg, prog)
    assert set(cols) == set(INSN_FIELDS)
    for i, insn in enumerate(insns):
        assert Insn(**{k: int(cols[k][i]) for k in INSN_FIELDS}) == decode_insn(cfg, prog[i])
        assert decode_insn(cfg, prog[i]) == insn
    # flat bytes and the column dict encode back to the same program
    assert decode_program(cfg, prog.tobytes())["opcode"].tolist() == cols["opcode"].tolist()
    assert np.array_equal(encode_program(cfg, cols), prog)


@_SETTINGS
@given(configs(), st.data())
def test_uop_round_trip(cfg, data):
    lay = isa_layout(cfg)
    n = data.draw(st.integers(0, 20))
    cols = {f.name: data.draw(st.lists(st.integers(0, f.mask), min_size=n, max_size=n))
            for f in lay.uop}
    words = encode_uops(cfg, cols["dst"], cols["src"], cols["wgt"])
    dec = decode_uops(cfg, words)
    for k in ("dst", "src", "wgt"):
        assert dec[k].tolist() == cols[k]


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize("insn,field", [
    (Insn(opcode=Opcode.LOAD, sram_base=1 << 16), "sram_base"),
    (Insn(opcode=Opcode.LOAD, dram_base=1 << 32), "dram_base"),
    (Insn(opcode=Opcode.LOAD, x_pad_1=16), "x_pad_1"),
    (Insn(opcode=Opcode.STORE, memory_type=8), "memory_type"),
    (Insn(opcode=Opcode.GEMM, uop_bgn=8192), "uop_bgn"),
    (Insn(opcode=Opcode.GEMM, iter_out=1 << 14), "iter_out"),
    (Insn(opcode=Opcode.GEMM, wgt_factor_in=1024), "wgt_factor_in"),
    (Insn(opcode=Opcode.ALU, imm=32768), "imm"),
    (Insn(opcode=Opcode.ALU, imm=-32769), "imm"),
    (Insn(opcode=Opcode.ALU, dst_factor_out=-1), "dst_factor_out"),
    (Insn(opcode=Opcode.FINISH, push_next=2), "push_next"),
])
def test_encode_rejects_out_of_range_fields(insn, field):
    with pytest.raises(ISAError, match=rf"field {field} = -?\d+ does not fit \d+ bits"):
        encode_insn(PYNQ, insn)
    with pytest.raises(ISAError, match=rf"instruction 1: field {field} = -?\d+ does not fit"):
        encode_program(PYNQ, [Insn(opcode=Opcode.FINISH), insn])


@pytest.mark.parametrize("op", [5, 6, 7, -1])
def test_encode_rejects_unknown_opcode(op):
    with pytest.raises(ISAError, match=rf"unknown opcode {op}"):
        encode_insn(PYNQ, Insn(opcode=op))
    with pytest.raises(ISAError, match=rf"instruction 0: unknown opcode {op}"):
        encode_program(PYNQ, [Insn(opcode=op)])


def test_encode_rejects_unknown_field_names():
    with pytest.raises(ISAError, match=r"unknown instruction field 'sram_bse'"):
        encode_insn(PYNQ, {"opcode": 0, "sram_bse": 3})
    with pytest.raises(ISAError, match=r"unknown instruction field 'sram_bse'"):
        encode_program(PYNQ, {"opcode": [0], "sram_bse": [3]})


def test_encode_program_column_errors():
    with pytest.raises(ISAError, match=r"opcode"):
        encode_program(PYNQ, {"x_size": [1]})
    with pytest.raises(ISAError, match=r"x_size has 2 values, opcode has 1"):
        encode_program(PYNQ, {"opcode": [0], "x_size": [1, 2]})


def test_encode_uops_errors():
    with pytest.raises(ISAError, match=r"micro-op 1: dst = 2048 does not fit 11 bits"):
        encode_uops(PYNQ, [0, 2048], [0, 0], [0, 0])
    with pytest.raises(ISAError, match=r"micro-op 0: wgt = -1 does not fit 10 bits"):
        encode_uops(PYNQ, [0], [0], [-1])
    with pytest.raises(ISAError, match=r"dst, src and wgt must have equal lengths"):
        encode_uops(PYNQ, [0, 1], [0], [0, 1])


@pytest.mark.parametrize("n", [0, 1, 15, 17, 32])
def test_decode_insn_bad_length(n):
    with pytest.raises(ISAError, match=rf"an instruction is 16 bytes, got {n}"):
        decode_insn(PYNQ, bytes(n))


@pytest.mark.parametrize("n", [1, 15, 17, 20, 33])
def test_decode_program_bad_length(n):
    with pytest.raises(ISAError, match=rf"program length {n} bytes is not a multiple of 16"):
        decode_program(PYNQ, bytes(n))
    with pytest.raises(ISAError, match=r"not a multiple of 16"):
        disassemble(PYNQ, np.zeros(n, dtype=np.uint8))


def test_decode_insn_unknown_opcode():
    with pytest.raises(ISAError, match=r"unknown opcode 5"):
        decode_insn(PYNQ, _bytes(5))


def test_empty_program():
    prog = encode_program(PYNQ, [])
    assert prog.shape == (0, 16)
    assert decode_program(PYNQ, prog)["opcode"].size == 0
    assert disassemble(PYNQ, prog) == []


# --------------------------------------------------------------------------- modules, disasm
@pytest.mark.parametrize("op,mem,module", [
    (Opcode.LOAD, MemType.INP, Module.LOAD), (Opcode.LOAD, MemType.WGT, Module.LOAD),
    (Opcode.LOAD, MemType.UOP, Module.COMPUTE), (Opcode.LOAD, MemType.ACC, Module.COMPUTE),
    (Opcode.LOAD, MemType.ACC8, Module.COMPUTE), (Opcode.STORE, MemType.OUT, Module.STORE),
    (Opcode.GEMM, 0, Module.COMPUTE), (Opcode.ALU, 0, Module.COMPUTE),
    (Opcode.FINISH, 0, Module.COMPUTE),
])
def test_insn_module(op, mem, module):
    """vta-anchor.md §2.3."""
    assert insn_module(op, mem) == module
    assert Insn(opcode=op, memory_type=mem).module == module


def test_disassemble_running_token_balance():
    prog = encode_program(PYNQ, [
        Insn(opcode=Opcode.LOAD, memory_type=MemType.INP, x_size=1, y_size=1, x_stride=1,
             push_next=1),                                                     # l2g +1
        Insn(opcode=Opcode.GEMM, pop_prev=1, push_next=1, uop_end=1, iter_out=1, iter_in=1),
        Insn(opcode=Opcode.STORE, memory_type=MemType.OUT, pop_prev=1, push_prev=1,
             x_size=1, y_size=1, x_stride=1),                                  # g2s -1, s2g +1
        Insn(opcode=Opcode.LOAD, memory_type=MemType.INP, pop_next=1),         # NOP, g2l -1
        Insn(opcode=Opcode.FINISH, pop_next=1),                                # s2g -1
    ])
    lines = disassemble(PYNQ, prog)
    assert len(lines) == 5
    assert lines[0].split()[1] == "LOAD" and "l2g=1 g2l=0 g2s=0 s2g=0" in lines[0]
    assert "GEMM" in lines[1] and "l2g=0 g2l=0 g2s=1 s2g=0" in lines[1]
    assert "STORE" in lines[2] and "l2g=0 g2l=0 g2s=0 s2g=1" in lines[2]
    assert "NOP-LOAD" in lines[3] and "l2g=0 g2l=-1 g2s=0 s2g=1" in lines[3]
    assert "FINISH" in lines[4] and "l2g=0 g2l=-1 g2s=0 s2g=0" in lines[4]


def test_disassemble_alu_shows_negative_imm():
    prog = encode_program(PYNQ, [Insn(opcode=Opcode.ALU, alu_opcode=AluOp.SHR, use_imm=1,
                                      imm=-3, uop_end=1, iter_out=1, iter_in=1)])
    (line,) = disassemble(PYNQ, prog)
    assert "ALU SHR" in line and "imm=-3" in line


# ------------------------------------------------------------------ token-queue table
#: vta-anchor.md §2.4, written out independently of hw.isa: queue -> (producer, push flag,
#: consumer, pop flag).
UPSTREAM_TOKENS = {
    "L2G": ("LOAD", "push_next", "COMPUTE", "pop_prev"),
    "G2L": ("COMPUTE", "push_prev", "LOAD", "pop_next"),
    "G2S": ("COMPUTE", "push_next", "STORE", "pop_prev"),
    "S2G": ("STORE", "push_prev", "COMPUTE", "pop_next"),
}


def test_token_routes_are_upstreams():
    from vtaforge.hw.isa import TOKEN_ROUTES

    got = {q.name: (r.producer.name, r.push_flag, r.consumer.name, r.pop_flag)
           for q, r in TOKEN_ROUTES.items()}
    assert got == UPSTREAM_TOKENS
    assert all(q == r.queue for q, r in TOKEN_ROUTES.items())


def test_flag_queues_follow_token_routes():
    from vtaforge.hw.isa import FLAG_QUEUES, Module, Queue

    want = {m: {f: None for f in ("pop_prev", "pop_next", "push_prev", "push_next")}
            for m in ("LOAD", "COMPUTE", "STORE")}
    for q, (prod, push, cons, pop) in UPSTREAM_TOKENS.items():
        want[prod][push] = q
        want[cons][pop] = q
    got = {Module(m).name: {f: (None if v is None else Queue(v).name) for f, v in fq.items()}
           for m, fq in FLAG_QUEUES.items()}
    assert got == want


def test_builder_flags_follow_token_routes():
    from vtaforge.hw.isa import Module, token_route
    from vtaforge.runtime.builder import _flag_for

    for prod, push, cons, pop in UPSTREAM_TOKENS.values():
        a, b = Module[prod], Module[cons]
        assert (_flag_for(a, b, push=True), _flag_for(a, b, push=False)) == (push, pop)
        assert token_route(a, b).push_flag == push
    with pytest.raises(ISAError, match="no token queue from LOAD to STORE"):
        token_route(Module.LOAD, Module.STORE)


def test_rtl_units_token_ports_follow_token_routes():
    """Each unit has exactly the token ports its routes need, and the core elaborates
    with every queue between its producer and consumer."""
    pytest.importorskip("amaranth")
    from amaranth.lib.wiring import In, Out

    from vtaforge.hw.core.compute import ComputeUnit
    from vtaforge.hw.core.load import LoadUnit
    from vtaforge.hw.core.store import StoreUnit

    cfg = preset("tiny")
    units = {"LOAD": LoadUnit(cfg), "COMPUTE": ComputeUnit(cfg), "STORE": StoreUnit(cfg)}
    for name, unit in units.items():
        want = {}
        for q, (prod, _, cons, _) in UPSTREAM_TOKENS.items():
            q = q.lower()
            if prod == name:
                want.update({f"{q}_has_room": In, f"{q}_push": Out})
            if cons == name:
                want.update({f"{q}_nonempty": In, f"{q}_pop": Out})
        tok = {n: m.flow for n, m in unit.signature.members.items()
               if n.split("_")[0] in ("l2g", "g2l", "g2s", "s2g")}
        assert tok == want, name


def test_rtl_header_layout_is_the_isa_header():
    """The typed views the RTL units read (hw/core/fields.py) put every field where
    hw.isa's layout does (and so where upstream's C bit-fields do, checked above)."""
    pytest.importorskip("amaranth")
    from amaranth.hdl import Shape

    from vtaforge.hw.core.fields import header_layout, insn_layout
    from vtaforge.hw.isa import HEADER, isa_layout

    pos = 0
    for name, width in HEADER:
        f = header_layout()[name]
        assert (f.offset, f.width) == (pos, width)
        pos += width
    for cfg in (preset("pynq"), preset("tiny")):
        for fmt, fields in isa_layout(cfg).formats().items():
            lay = insn_layout(cfg, fmt)
            assert lay.size == 128
            for fld in fields:
                m = lay[fld.name]
                signed = Shape.cast(m.shape).signed
                assert (m.offset, m.width, signed) == (fld.lsb, fld.width, fld.signed)
