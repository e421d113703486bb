"""Tests for ``vtaforge config show`` / ``vtaforge config presets``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from vtaforge.cli import main
from vtaforge.hw.config import PRESETS, VTAConfig, preset


def _run(*args):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("name", PRESETS)
def test_show_preset(name):
    cfg = preset(name)
    r = _run("config", "show", name)
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0] == f"config {name}"
    rows = dict(line.split(None, 1) for line in r.stdout.splitlines()[1:])
    assert rows["TARGET"] == cfg.TARGET
    assert rows["BITSTREAM"] == cfg.bitstream_name
    assert rows["FINGERPRINT"] == f"0x{cfg.fingerprint:08x}"
    assert rows["MACS_PER_CYCLE"] == str(cfg.macs_per_cycle)
    assert rows["LOG_ACC_BUFF_SIZE"] == str(cfg.LOG_ACC_BUFF_SIZE)


def test_show_default_is_pynq():
    r = _run("config", "show")
    assert r.exit_code == 0
    assert "1x16_i8w8a32_15_15_18_17" in r.stdout
    assert "SRAM_TOTAL_BYTES" in r.stdout and "491520" in r.stdout


@pytest.mark.parametrize("name", PRESETS)
def test_show_json_round_trip(name):
    r = _run("config", "show", name, "--json")
    assert r.exit_code == 0
    assert VTAConfig.from_dict(json.loads(r.stdout)) == preset(name)


def test_show_json_file(tmp_path):
    d = {"TARGET": "sim", "HW_VER": "0.0.2", "LOG_INP_WIDTH": 3, "LOG_WGT_WIDTH": 3,
         "LOG_ACC_WIDTH": 5, "LOG_BATCH": 2, "LOG_BLOCK": 3, "LOG_UOP_BUFF_SIZE": 15,
         "LOG_INP_BUFF_SIZE": 16, "LOG_WGT_BUFF_SIZE": 16, "LOG_ACC_BUFF_SIZE": 18}
    p = tmp_path / "vta_config.json"
    p.write_text(json.dumps(d, indent=2))
    r = _run("config", "show", str(p))
    assert r.exit_code == 0
    assert "4x8_i8w8a32_15_16_16_18" in r.stdout
    r = _run("config", "show", str(p), "--json")
    assert r.exit_code == 0
    assert json.loads(r.stdout) == d


def test_presets_command():
    r = _run("config", "presets")
    assert r.exit_code == 0
    assert r.stdout.split() == list(PRESETS)


def _assert_one_error_line(r, *needles):
    assert r.exit_code != 0
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ")
    for n in needles:
        assert n in lines[0]
    assert "Traceback" not in r.output


def test_bad_preset():
    _assert_one_error_line(_run("config", "show", "pynqq"), "pynqq", "neither a preset")


def test_missing_file(tmp_path):
    _assert_one_error_line(_run("config", "show", str(tmp_path / "nope.json")), "nope.json")


def test_bad_json_file(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    _assert_one_error_line(_run("config", "show", str(p)), "bad.json", "not valid JSON")


def test_invalid_value_in_file(tmp_path):
    p = tmp_path / "big.json"
    p.write_text(json.dumps({"LOG_BATCH": 9}))
    _assert_one_error_line(_run("config", "show", str(p), "--json"), "LOG_BATCH = 9")
