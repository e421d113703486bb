"""Tests for ``vtaforge.hw.config``: upstream JSON compatibility, derived quantities,
validation messages and the fingerprint.

Expected values are written by hand from vta-anchor.md §1.1–§1.3 and field fault BR-10,
never computed with the code under test.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from vtaforge.hw.config import (
    PRESETS,
    RANGES,
    TARGETS,
    ConfigError,
    MemType,
    VTAConfig,
    load_config,
    preset,
)

# --------------------------------------------------------------------------- upstream JSON
# Upstream HW_VER 0.0.2 default `vta_config.json` (vta-anchor.md §1.1), written by hand.
UPSTREAM_DEFAULT = {
    "TARGET": "sim",
    "HW_VER": "0.0.2",
    "LOG_INP_WIDTH": 3,
    "LOG_WGT_WIDTH": 3,
    "LOG_ACC_WIDTH": 5,
    "LOG_BATCH": 0,
    "LOG_BLOCK": 4,
    "LOG_UOP_BUFF_SIZE": 15,
    "LOG_INP_BUFF_SIZE": 15,
    "LOG_WGT_BUFF_SIZE": 18,
    "LOG_ACC_BUFF_SIZE": 17,
}


def _sample(target: str, hw_ver: str = "0.0.2") -> dict:
    d = dict(UPSTREAM_DEFAULT)
    d["TARGET"] = target
    d["HW_VER"] = hw_ver
    return d


#: The shipped samples: same numbers as the default, only TARGET (and zcu104's HW_VER) differ.
UPSTREAM_SAMPLES = {
    "default": UPSTREAM_DEFAULT,
    "pynq_sample": _sample("pynq"),
    "ultra96_sample": _sample("ultra96"),
    "zcu104_sample": _sample("zcu104", "0.0.1"),
    "fsim_sample": _sample("sim"),
    "tsim_sample": _sample("tsim"),
    "intelfocl_sample": _sample("intelfocl"),
    "de10nano_sample": _sample("de10nano"),
}


@pytest.mark.parametrize("name", sorted(UPSTREAM_SAMPLES))
def test_upstream_json_loads_unchanged_and_round_trips(name, tmp_path):
    d = UPSTREAM_SAMPLES[name]
    cfg = VTAConfig.from_dict(d)
    assert cfg.TARGET == d["TARGET"]
    assert cfg.HW_VER == d["HW_VER"]
    assert (cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT) == (1, 16, 16)
    assert cfg.to_dict() == d
    assert list(cfg.to_dict()) == list(d)  # upstream's key order
    # the same through a file, written like upstream's
    p = tmp_path / "vta_config.json"
    p.write_text(json.dumps(d, indent=2) + "\n")
    cfg2 = VTAConfig.from_json_file(p)
    assert cfg2 == cfg
    assert load_config(str(p)) == cfg
    assert json.loads(cfg.to_json()) == d


def test_zcu104_sample_keeps_hw_ver_001():
    cfg = VTAConfig.from_dict(UPSTREAM_SAMPLES["zcu104_sample"])
    assert cfg.HW_VER == "0.0.1"
    assert cfg.to_dict()["HW_VER"] == "0.0.1"


@pytest.mark.parametrize("target,part,mhz,bus", [
    ("pynq", "xc7z020clg484-1", 100.0, 64),
    ("sim", "xc7z020clg484-1", 100.0, 64),
    ("ultra96", "xczu3eg-sbva484-1-e", 300.0, 128),
    ("zcu104", "xczu7ev-ffvc1156-2-e", 300.0, 128),
])
def test_target_defaults_follow_pkg_config(target, part, mhz, bus):
    """vta-anchor.md §1.3: part, clock and AXI bus width per target."""
    cfg = VTAConfig.from_dict(_sample(target))
    assert cfg.PART == part
    assert cfg.CLOCK_MHZ == mhz
    assert cfg.BUS_WIDTH == bus


def test_separate_block_in_out_keys():
    d = dict(UPSTREAM_DEFAULT)
    del d["LOG_BLOCK"]
    d["LOG_BLOCK_IN"] = 5
    d["LOG_BLOCK_OUT"] = 4
    cfg = VTAConfig.from_dict(d)
    assert (cfg.BLOCK_IN, cfg.BLOCK_OUT) == (32, 16)
    assert VTAConfig.from_dict(cfg.to_dict()) == cfg
    out = cfg.to_dict()
    assert out["LOG_BLOCK_IN"] == 5 and out["LOG_BLOCK_OUT"] == 4 and "LOG_BLOCK" not in out
    # equal separate keys are the same core as LOG_BLOCK
    d2 = dict(d, LOG_BLOCK_IN=4, LOG_BLOCK_OUT=4)
    assert VTAConfig.from_dict(d2) == VTAConfig.from_dict(UPSTREAM_DEFAULT)
    # LOG_BLOCK with a consistent explicit key is fine
    assert VTAConfig.from_dict(dict(UPSTREAM_DEFAULT, LOG_BLOCK_IN=4)).BLOCK_IN == 16


def test_old_schema_log_out_width_accepted_when_equal():
    cfg = VTAConfig.from_dict(dict(UPSTREAM_DEFAULT, LOG_OUT_WIDTH=3))
    assert cfg.LOG_OUT_WIDTH == 3
    with pytest.raises(ConfigError, match=r"LOG_OUT_WIDTH = 4 .*LOG_INP_WIDTH"):
        VTAConfig.from_dict(dict(UPSTREAM_DEFAULT, LOG_OUT_WIDTH=4))


def test_pr3661_batch_config():
    """apache/tvm PR #3661: LOG_BATCH=2, LOG_BLOCK=3, INP 16, WGT 16, ACC 18."""
    d = dict(UPSTREAM_DEFAULT, LOG_BATCH=2, LOG_BLOCK=3, LOG_INP_BUFF_SIZE=16,
             LOG_WGT_BUFF_SIZE=16, LOG_ACC_BUFF_SIZE=18)
    cfg = VTAConfig.from_dict(d)
    assert cfg.to_dict() == d
    assert (cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT) == (4, 8, 8)
    assert cfg.bitstream_name == "4x8_i8w8a32_15_16_16_18"


# --------------------------------------------------------------------------- derived values
def test_pynq_derived_against_anchor_table():
    """vta-anchor.md §1.2, every row of the default-config table."""
    c = preset("pynq")
    assert c.macs_per_cycle == 256
    assert c.elem_bits(MemType.INP) == 128 and c.elem_bytes(MemType.INP) == 16
    assert c.elem_bits(MemType.WGT) == 2048 and c.elem_bytes(MemType.WGT) == 256
    assert c.elem_bits(MemType.ACC) == 512 and c.elem_bytes(MemType.ACC) == 64
    assert c.elem_bits(MemType.OUT) == 128 and c.elem_bytes(MemType.OUT) == 16
    assert c.elem_bits(MemType.UOP) == 32 and c.elem_bytes(MemType.UOP) == 4
    assert c.elem_bytes(MemType.ACC8) == 16  # BATCH*BLOCK_OUT int8 values
    assert (c.UOP_DEPTH, c.LOG_UOP_DEPTH) == (8192, 13)
    assert (c.INP_DEPTH, c.LOG_INP_DEPTH) == (2048, 11)
    assert (c.WGT_DEPTH, c.LOG_WGT_DEPTH) == (1024, 10)
    assert (c.ACC_DEPTH, c.LOG_ACC_DEPTH) == (2048, 11)
    assert c.OUT_DEPTH == 2048
    assert c.LOG_OUT_BUFF_SIZE == 15
    s = c.sram_bytes
    assert (s["uop"], s["inp"], s["wgt"], s["acc"], s["out"]) == (
        32 * 1024, 32 * 1024, 256 * 1024, 128 * 1024, 32 * 1024)
    assert s["total"] == 480 * 1024 == 3_932_160 // 8
    assert c.bitstream_name == "1x16_i8w8a32_15_15_18_17"
    assert c.peak_gops == pytest.approx(51.2)
    assert preset("ultra96").peak_gops == pytest.approx(2 * 256 * 300 / 1000)
    assert c.dram_alignment == 256  # the weight element
    d = c.derived()
    assert d["SRAM_TOTAL_BYTES"] == 491520
    assert d["MACS_PER_CYCLE"] == 256
    assert d["BITSTREAM"] == "1x16_i8w8a32_15_15_18_17"
    assert (d["UOP_DST_BITS"], d["UOP_SRC_BITS"], d["UOP_WGT_BITS"]) == (11, 11, 10)


# Hand-computed rows (BR-10 test sketch).  Element bytes follow
#   INP = BATCH*BLOCK_IN*INP_W/8, WGT = BLOCK_OUT*BLOCK_IN*WGT_W/8, ACC = BATCH*BLOCK_OUT*ACC_W/8,
#   OUT = BATCH*BLOCK_OUT*OUT_W/8 (OUT_W = INP_W), ACC8 = BATCH*BLOCK_OUT;
# depth = buffer bytes / element bytes; LOG_OUT_BUFF = ACC_BUFF + LOG_OUT_W - LOG_ACC_W.
# columns: elem bytes (uop, inp, wgt, acc, out, acc8), log depth (uop, inp, wgt, acc, out),
#          LOG_OUT_BUFF_SIZE, SRAM total bytes, MACs/cycle, uop field widths (dst, src, wgt)
DERIVED_TABLE = {
    "pynq": (
        {},
        (4, 16, 256, 64, 16, 16), (13, 11, 10, 11, 11), 15, 491520, 256, (11, 11, 10)),
    "pr3661": (
        dict(LOG_BATCH=2, LOG_BLOCK_IN=3, LOG_BLOCK_OUT=3, LOG_INP_BUFF_SIZE=16,
             LOG_WGT_BUFF_SIZE=16, LOG_ACC_BUFF_SIZE=18),
        (4, 32, 64, 128, 32, 32), (13, 11, 10, 11, 11), 16, 491520, 256, (11, 11, 10)),
    # BR-10 (2): INP element 32 B but OUT element 16 B
    "br10_block_in5_out4": (
        dict(LOG_BLOCK_IN=5, LOG_BLOCK_OUT=4),
        (4, 32, 512, 64, 16, 16), (13, 10, 9, 11, 11), 15, 491520, 512, (11, 11, 9)),
    "tiny": (
        dict(TARGET="sim", LOG_BLOCK_IN=2, LOG_BLOCK_OUT=2, LOG_UOP_BUFF_SIZE=12,
             LOG_INP_BUFF_SIZE=12, LOG_WGT_BUFF_SIZE=13, LOG_ACC_BUFF_SIZE=13, DSP_PACKING=1),
        (4, 4, 16, 16, 4, 4), (10, 10, 9, 9, 9), 11, 26624, 16, (9, 10, 9)),
    "batch2": (
        dict(TARGET="sim", LOG_BATCH=1, LOG_BLOCK_IN=3, LOG_BLOCK_OUT=2, LOG_UOP_BUFF_SIZE=12,
             LOG_INP_BUFF_SIZE=13, LOG_WGT_BUFF_SIZE=13, LOG_ACC_BUFF_SIZE=14, DSP_PACKING=1),
        (4, 16, 32, 32, 8, 8), (10, 9, 8, 9, 9), 12, 40960, 64, (9, 9, 8)),
    "int16": (
        dict(LOG_INP_WIDTH=4, LOG_WGT_WIDTH=4),
        (4, 32, 512, 64, 32, 16), (13, 10, 9, 11, 11), 16, 524288, 256, (11, 11, 9)),
    # int4 activations: INP and OUT elements of 16 nibbles (8 B); OUT view 2^(17+2-5) B
    "int4_act": (
        dict(LOG_INP_WIDTH=2, LOG_INP_BUFF_SIZE=14),
        (4, 8, 256, 64, 8, 16), (13, 11, 10, 11, 11), 14, 458752, 256, (11, 11, 10)),
    "int4_act_wgt": (
        dict(LOG_INP_WIDTH=2, LOG_WGT_WIDTH=2, LOG_INP_BUFF_SIZE=14, LOG_WGT_BUFF_SIZE=17),
        (4, 8, 128, 64, 8, 16), (13, 11, 10, 11, 11), 14, 327680, 256, (11, 11, 10)),
    "acc16": (
        dict(LOG_ACC_WIDTH=4, LOG_ACC_BUFF_SIZE=16),
        (4, 16, 256, 32, 16, 16), (13, 11, 10, 11, 11), 15, 425984, 256, (11, 11, 10)),
}


@pytest.mark.parametrize("name", sorted(DERIVED_TABLE))
def test_derived_table(name):
    changes, eb, ld, log_out_buff, sram_total, macs, uop_bits = DERIVED_TABLE[name]
    cfg = VTAConfig(**changes)
    mems = (MemType.UOP, MemType.INP, MemType.WGT, MemType.ACC, MemType.OUT, MemType.ACC8)
    assert tuple(cfg.elem_bytes(m) for m in mems) == eb
    assert tuple(cfg.elem_bits(m) for m in mems) == tuple(8 * b for b in eb)
    assert tuple(cfg.log_depth(m) for m in mems[:5]) == ld
    assert tuple(cfg.depth(m) for m in mems[:5]) == tuple(1 << x for x in ld)
    assert cfg.log_depth(MemType.ACC8) == ld[3]
    assert cfg.LOG_OUT_BUFF_SIZE == log_out_buff
    assert cfg.sram_bytes["total"] == sram_total
    assert cfg.macs_per_cycle == macs
    d = cfg.derived()
    assert (d["UOP_DST_BITS"], d["UOP_SRC_BITS"], d["UOP_WGT_BITS"]) == uop_bits
    assert cfg.dram_alignment == max(64, *eb)
    # the OUT view is exactly as deep as ACC (BR-10 (1): never 16x larger)
    assert cfg.OUT_DEPTH == cfg.ACC_DEPTH


def test_br10_out_buff_size_is_15_not_19():
    cfg = VTAConfig(LOG_ACC_BUFF_SIZE=17, LOG_ACC_WIDTH=5, LOG_INP_WIDTH=3)
    assert cfg.LOG_OUT_BUFF_SIZE == 17 + 3 - 5 == 15


def test_br10_out_elem_differs_from_inp_elem():
    cfg = VTAConfig(LOG_BLOCK_IN=5, LOG_BLOCK_OUT=4)
    assert cfg.elem_bytes(MemType.INP) == 32
    assert cfg.elem_bytes(MemType.OUT) == 16


@pytest.mark.parametrize("name", PRESETS)
def test_presets_construct(name):
    cfg = preset(name)
    assert isinstance(cfg, VTAConfig)
    assert load_config(name) == cfg
    assert VTAConfig.from_dict(cfg.to_dict()) == cfg
    assert VTAConfig.from_dict(json.loads(cfg.to_json())) == cfg
    assert cfg.derived()["FINGERPRINT"] == f"0x{cfg.fingerprint:08x}"


def test_named_presets_shapes():
    assert (preset("tiny").BATCH, preset("tiny").BLOCK_IN, preset("tiny").BLOCK_OUT) == (1, 4, 4)
    b = preset("batch2")
    assert (b.BATCH, b.BLOCK_IN, b.BLOCK_OUT) == (2, 8, 4)
    assert load_config(None) == preset("pynq")
    assert load_config(b) is b


# --------------------------------------------------------------------------- validation
def _err(changes: dict, via_dict: bool = False) -> str:
    with pytest.raises(ConfigError) as ei:
        if via_dict:
            VTAConfig.from_dict(changes)
        else:
            VTAConfig(**changes)
    return str(ei.value)


_RANGE_CASES = [(k, v) for k, (lo, hi) in RANGES.items() for v in (lo - 1, hi + 1)]


@pytest.mark.parametrize("key,value", _RANGE_CASES)
def test_each_key_out_of_range(key, value):
    lo, hi = RANGES[key]
    msg = _err({key: value})
    assert re.search(rf"\b{key} = {value} is out of range; allowed: integers {lo}\.\.{hi}\b", msg), msg
    # the same through from_dict (upstream JSON path)
    msg2 = _err({key: value}, via_dict=True)
    assert key in msg2 and str(value) in msg2


@pytest.mark.parametrize("key", sorted(RANGES))
def test_each_key_rejects_non_integers(key):
    lo, hi = RANGES[key]
    for bad in (True, float(lo), str(lo)):
        msg = _err({key: bad})
        # a wrong type is named as such, not reported as out of range
        assert re.search(rf"\b{key} = {re.escape(repr(bad))} must be an integer in "
                         rf"{lo}\.\.{hi}\b", msg), msg
        assert "out of range" not in msg


def test_log_block_out_of_range_names_log_block():
    msg = _err({"LOG_BLOCK": 9}, via_dict=True)
    assert re.search(r"\bLOG_BLOCK = 9 is out of range; allowed: integers 1\.\.7", msg), msg


def test_buffer_too_small_for_its_element():
    # a weight element is 256 B at pynq, so a 256 B buffer holds one element (< 2)
    msg = _err({"LOG_WGT_BUFF_SIZE": 8})
    assert re.search(r"LOG_WGT_BUFF_SIZE = 8 is out of range .*256 B.*allowed 9\.\.24", msg), msg


def test_buffer_too_deep_for_sram_base():
    # INP element 16 B: depth 2^17 > 2^16 cannot be addressed by the 16-bit sram_base
    msg = _err({"LOG_INP_BUFF_SIZE": 21})
    assert re.search(r"LOG_INP_BUFF_SIZE = 21 is out of range .*allowed 5\.\.20", msg), msg


def test_unknown_key():
    msg = _err({"LOG_BLOCKS": 4}, via_dict=True)
    assert re.search(r"unknown config key 'LOG_BLOCKS'", msg), msg


def test_bad_target():
    msg = _err({"TARGET": "vu9p"}, via_dict=True)
    assert re.search(r"TARGET = 'vu9p' is not supported; allowed: .*pynq", msg), msg
    assert re.search(r"TARGET = 'vu9p' is not supported", _err({"TARGET": "vu9p"}))
    msg = _err({"TARGET": ["pynq"]})
    assert "TARGET = ['pynq'] is not supported" in msg


@pytest.mark.parametrize("key", ["ACC_8BIT", "ALU_MUL"])
def test_non_bool_flags(key):
    for bad in (1, 0, "true", None):
        msg = _err({key: bad}, via_dict=True)
        assert re.search(rf"{key} = {re.escape(repr(bad))} must be a boolean", msg), msg


def test_lut_multipliers_too_large():
    msg = _err({"LUT_MULTIPLIERS": 257})
    assert re.search(r"LUT_MULTIPLIERS = 257 is out of range; allowed: integers 0\.\.256", msg), msg
    assert VTAConfig(LUT_MULTIPLIERS=256).LUT_MULTIPLIERS == 256
    assert re.search(r"LUT_MULTIPLIERS = -1 is out of range", _err({"LUT_MULTIPLIERS": -1}))


def test_other_scalar_checks():
    assert re.search(r"CLOCK_MHZ = 0 is out of range; allowed: 1\.\.1000", _err({"CLOCK_MHZ": 0}))
    assert re.search(r"CLOCK_MHZ = 5000\.0 is out of range", _err({"CLOCK_MHZ": 5000.0}))
    assert re.search(r"PART = '' must be a non-empty", _err({"PART": ""}))
    assert re.search(r"CLOCK_MHZ = '100' must be a number in 1\.\.1000", _err({"CLOCK_MHZ": "100"}))
    assert re.search(r"LUT_MULTIPLIERS = 1\.0 must be an integer in 0\.\.",
                     _err({"LUT_MULTIPLIERS": 1.0}))
    assert re.search(r"HW_VER = 2 must be a string", _err({"HW_VER": 2}))


def test_contradicting_log_block():
    msg = _err({"LOG_BLOCK": 4, "LOG_BLOCK_IN": 3}, via_dict=True)
    assert re.search(r"LOG_BLOCK_IN = 3 contradicts LOG_BLOCK = 4", msg), msg
    msg = _err({"LOG_BLOCK": 4, "LOG_BLOCK_OUT": 5}, via_dict=True)
    assert re.search(r"LOG_BLOCK_OUT = 5 contradicts LOG_BLOCK = 4", msg), msg


def test_not_a_json_object():
    assert re.search(r"config must be a JSON object, got list", _err([1, 2], via_dict=True))


def test_bad_json_file(tmp_path):
    p = tmp_path / "broken.json"
    p.write_text('{"LOG_BATCH": 0,,}')
    with pytest.raises(ConfigError, match=r"broken\.json.* is not valid JSON: .*\(line 1, column \d+\)"):
        VTAConfig.from_json_file(p)
    with pytest.raises(ConfigError, match=r"is not valid JSON"):
        load_config(str(p))


def test_invalid_content_in_file_names_the_file(tmp_path):
    p = tmp_path / "wide.json"
    p.write_text(json.dumps(dict(UPSTREAM_DEFAULT, LOG_BATCH=9)))
    with pytest.raises(ConfigError, match=r"wide\.json: LOG_BATCH = 9 is out of range"):
        VTAConfig.from_json_file(p)


def test_missing_file(tmp_path):
    p = tmp_path / "nope.json"
    with pytest.raises(ConfigError, match=r"cannot read config file .*nope\.json"):
        VTAConfig.from_json_file(p)
    with pytest.raises(ConfigError, match=r"cannot read config file .*nope\.json"):
        load_config(str(p))


def test_load_config_unknown_spec():
    with pytest.raises(ConfigError, match=r"'pynqq' is neither a preset .* nor a config file"):
        load_config("pynqq")
    with pytest.raises(ConfigError, match=r"unknown preset 'pynqq'; allowed: pynq"):
        preset("pynqq")


def test_isa_overflow_128_bits_rejected():
    # UOP depth 2^16: uop_bgn/uop_end grow to 16/17 bits and GEMM no longer fits 128 bits
    msg = _err({"LOG_UOP_BUFF_SIZE": 18})
    assert re.search(r"GEMM instruction fields need \d+ bits with this config \(> 128\)", msg), msg
    assert "LOG_*_BUFF_SIZE" in msg
    # ACC depth 2^12 widens four GEMM/ALU factor fields
    msg = _err({"LOG_ACC_BUFF_SIZE": 18})
    assert re.search(r"instruction fields need \d+ bits with this config \(> 128\)", msg), msg


def test_uop_overflow_32_bits_rejected():
    # wgt depth 2^12, acc 2^11, inp 2^9: GEMM word 1 holds 2*11 + 2*9 + 2*12 = 64 bits, but
    # the micro-op needs dst 11 + src max(11, 9) + wgt 12 = 34 bits
    msg = _err({"LOG_WGT_BUFF_SIZE": 20, "LOG_INP_BUFF_SIZE": 13})
    assert re.search(r"micro-op fields need 34 bits with this config \(> 32\): "
                     r"dst 11 \+ src 11 \+ wgt 12", msg), msg


def test_replace_validates():
    c = preset("pynq")
    assert c.replace(LOG_BATCH=1).BATCH == 2
    with pytest.raises(ConfigError, match="LOG_BATCH = 7"):
        c.replace(LOG_BATCH=7)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.LOG_BATCH = 1  # type: ignore[misc]


# --------------------------------------------------------------------------- fingerprint
#: Recorded from the first run of this suite; a change means every deployed core and
#: compiled program of the default config becomes incompatible: change it only on purpose.
PYNQ_FINGERPRINT = 0x76479F18


def test_fingerprint_pynq_is_stable():
    assert preset("pynq").fingerprint == PYNQ_FINGERPRINT
    assert VTAConfig().fingerprint == PYNQ_FINGERPRINT
    assert 0 <= preset("pynq").fingerprint < 1 << 32


def test_fingerprint_independent_of_dict_order():
    d = dict(UPSTREAM_DEFAULT, TARGET="pynq", ALU_MUL=True, INSN_QUEUE_DEPTH=64)
    rev = dict(reversed(list(d.items())))
    assert list(rev) != list(d)
    assert VTAConfig.from_dict(d).fingerprint == VTAConfig.from_dict(rev).fingerprint


def test_fingerprint_ignores_target_and_hw_ver_when_hardware_equal():
    fps = {VTAConfig.from_dict(_sample(t)).fingerprint for t in ("sim", "tsim", "pynq", "intelfocl")}
    assert fps == {PYNQ_FINGERPRINT}
    assert VTAConfig(HW_VER="0.0.1").fingerprint == PYNQ_FINGERPRINT
    # a target's part, clock and bus width apply to direct construction too
    assert VTAConfig(TARGET="zcu104") == preset("zcu104")
    assert VTAConfig(TARGET="zcu104", LOG_BUS_WIDTH=6, CLOCK_MHZ=100.0,
                     PART="xc7z020clg484-1").fingerprint == PYNQ_FINGERPRINT
    assert preset("zcu104").fingerprint != PYNQ_FINGERPRINT  # different bus, clock, part


_FP_CHANGES = {
    "LOG_INP_WIDTH": 4, "LOG_WGT_WIDTH": 4, "LOG_BATCH": 1,
    # a 16-bit accumulator halves the ACC element; keep the ACC depth at 2^11 so the ISA fits
    "LOG_ACC_WIDTH": {"LOG_ACC_WIDTH": 4, "LOG_ACC_BUFF_SIZE": 15},
    "LOG_BLOCK_IN": {"LOG_BLOCK_IN": 3, "LOG_INP_BUFF_SIZE": 14, "LOG_WGT_BUFF_SIZE": 17},
    "LOG_BLOCK_OUT": {"LOG_BLOCK_OUT": 3, "LOG_WGT_BUFF_SIZE": 17, "LOG_ACC_BUFF_SIZE": 16},
    "LOG_UOP_BUFF_SIZE": 14, "LOG_INP_BUFF_SIZE": 14,
    "LOG_WGT_BUFF_SIZE": 17, "LOG_ACC_BUFF_SIZE": 16, "LOG_BUS_WIDTH": 7,
    "INSN_QUEUE_DEPTH": 256, "TOKEN_QUEUE_DEPTH": 16, "CLOCK_MHZ": 150.0,
    "PART": "xc7z010clg400-1", "ACC_8BIT": False, "ALU_MUL": True, "DSP_PACKING": 1,
    "LUT_MULTIPLIERS": 16, "INSN_RING": 64, "ALU_REQUANT": True,
    "REQ_ENGINE": {"ALU_REQUANT": True, "REQ_ENGINE": True}, "ALU_FORWARD": True,
    "DMA_OUTSTANDING": 4, "DEPTHWISE_TAPS": 3,
    "REQ_LANE_SHIFT": {"ALU_REQUANT": True, "REQ_LANE_SHIFT": True},
    "LOAD_AHEAD": {"DMA_OUTSTANDING": 4, "LOAD_AHEAD": True},
}


def test_fingerprint_changes_with_every_hardware_field():
    hw_fields = {f.name for f in dataclasses.fields(VTAConfig)} - {"TARGET", "HW_VER"}
    assert set(_FP_CHANGES) == hw_fields, "add new hardware fields to _FP_CHANGES"
    seen = {PYNQ_FINGERPRINT}
    for k, v in _FP_CHANGES.items():
        c = VTAConfig(**(v if isinstance(v, dict) else {k: v}))
        assert c.fingerprint != PYNQ_FINGERPRINT, k
        seen.add(c.fingerprint)
    assert len(seen) == len(_FP_CHANGES) + 1


def test_fingerprint_int_and_float_clock_equal():
    assert VTAConfig(CLOCK_MHZ=100).fingerprint == PYNQ_FINGERPRINT


def test_targets_table_covers_upstream_targets():
    assert set(TARGETS) == {"sim", "tsim", "pynq", "ultra96", "zcu104", "de10nano", "intelfocl"}


def test_a_fifo_config_file_is_refused_not_opened(tmp_path):
    """``load_config`` on a FIFO blocked in open() until a writer came (the board runner's
    ``--config``); it is refused by its type now, as a device is."""
    import os

    from vtaforge.hw.config import ConfigError, load_config

    fifo = tmp_path / "c.json"
    os.mkfifo(fifo)
    for p in (fifo, "/dev/zero"):
        with pytest.raises(ConfigError, match=r"is not a regular file \(a FIFO or a device\)"):
            load_config(str(p))


@pytest.mark.parametrize("spec, message", [
    ("", "config '' is empty: give a preset ("),
    ("  ", "config '  ' is empty"),
    ("some/dir/nope", "cannot read config file 'some/dir/nope': No such file or directory"),
])
def test_load_config_names_an_empty_spec_and_a_missing_path(spec, message):
    """``--config ''`` was "cannot read config file '.': Is a directory" (Path('') is '.');
    a missing path without .json was "neither a preset nor a config file"."""
    from vtaforge.hw.config import ConfigError, load_config

    with pytest.raises(ConfigError) as e:
        load_config(spec)
    assert str(e.value).startswith(message), str(e.value)
