"""Facts that were typed by hand in more than one place are derived from their one source
(issue 23 item 3); each derived value is checked against the value that was hand-typed
before, so the derivation changed nothing.

- the DSE cycle model's token routes (dse/performance.py) from hw/isa.py ``TOKEN_ROUTES``;
- the control slave's register bits (hw/core/axi.py) from hw/regs.py;
- the CLI's board lists (``board project --board``, ``dse run --board``) from hw/parts.py.
"""

from __future__ import annotations

import pytest

from vtaforge.dse.performance import TOKEN_POPS, TOKEN_PUSHES
from vtaforge.hw import parts


def test_cycle_model_token_routes_are_the_isa_queues():
    # hand-typed in CycleModel._schedule before (queue ids: 0 l2g, 1 g2l, 2 g2s, 3 s2g)
    assert TOKEN_POPS == {0: (("pop_next", 1),), 1: (("pop_prev", 0), ("pop_next", 3)),
                          2: (("pop_prev", 2),)}
    assert TOKEN_PUSHES == {0: (("push_next", 0),), 1: (("push_prev", 1), ("push_next", 2)),
                            2: (("push_prev", 3),)}


def test_axi_register_bits_are_hw_regs_fields():
    pytest.importorskip("amaranth")
    from amaranth.hdl import Cat, Const, Signal

    from vtaforge.hw.core import axi

    # the bit numbers hw/core/axi.py wrote by hand before
    old = {("CTRL", "START"): 0, ("CTRL", "IRQ_EN"): 1, ("IRQ_STATUS", "DONE"): 0,
           ("STATUS", "BUSY"): 0, ("STATUS", "DONE"): 1, ("STATUS", "ERROR"): 2}
    for (reg, field), bit in old.items():
        assert axi._lsb(reg, field) == bit, (reg, field)
    busy, done, err, irq_en, irq = (Signal(name=n) for n in ("busy", "done", "err", "irq_en",
                                                              "irq"))
    # the read values: the same expressions as the hand-built ones
    assert repr(axi._reg_value("CTRL", IRQ_EN=irq_en)) == repr(Cat(Const(0, 1), irq_en))
    assert (repr(axi._reg_value("STATUS", BUSY=busy, DONE=done, ERROR=err))
            == repr(Cat(busy, done, err)))
    assert axi._reg_value("IRQ_STATUS", DONE=irq) is irq


def test_cli_board_lists_are_hw_parts_boards():
    pytest.importorskip("click")
    from vtaforge.commands.board import board_list, project_cmd
    from vtaforge.commands.dse import run_cmd

    old = "pynq-z1, pynq-z2, ultra96-v2 or zcu104"     # board project --board, by hand
    # and the alias ultra96, which board_spec takes (as dse run --board does) since h-fix
    assert board_list() == old.replace("ultra96-v2", "ultra96, ultra96-v2")
    helps = {o.name: o.help for o in project_cmd.params}
    assert helps["board"].startswith(board_list() + " (default")
    # dse run --board named three examples by hand; it now lists every name it accepts
    names = parts.board_names(aliases=True)
    assert {"pynq-z2", "ultra96", "zcu104"} <= set(names)
    assert set(names) == set(parts.BOARDS) | set(parts.BOARD_ALIASES)
    dse_help = {o.name: o.help for o in run_cmd.params}["board"]
    assert dse_help.startswith(" | ".join(names) + " (hw/parts.py)")


def test_preset_lists_name_every_preset():
    """The preset lists typed in the docs (docs/cli.md ``config presets``, README.md's
    preset paragraph, docs/config.md's table) name exactly hw/config.py's PRESETS, in its
    order (the fast cores first); ``vtaforge config presets`` prints PRESETS."""
    import re
    from pathlib import Path

    from click.testing import CliRunner

    from vtaforge.cli import main
    from vtaforge.hw.config import FAST_PRESETS, PRESETS

    root = Path(__file__).resolve().parent.parent
    cli = (root / "docs" / "cli.md").read_text()
    m = re.search(r"`vtaforge config presets`: the preset names \(([^;]*);", cli)
    assert m and re.findall(r"`([^`]+)`", m.group(1)) == list(PRESETS)
    table = (root / "docs" / "config.md").read_text().split("## Presets", 1)[1]
    assert re.findall(r"^\| `([^`]+)` \|", table, re.M) == list(PRESETS)
    readme = (root / "README.md").read_text()
    m = re.search(r"^Presets: (.*?)\. Any upstream", readme, re.S | re.M)
    assert m, "README.md has no 'Presets: ...' paragraph"
    named = [n for n in re.findall(r"`([a-z0-9-]+)`", m.group(1)) if n in PRESETS]
    assert named == list(PRESETS), named
    assert set(FAST_PRESETS.values()) <= set(PRESETS)
    assert list(PRESETS)[:len(FAST_PRESETS)] == list(FAST_PRESETS.values())
    r = CliRunner().invoke(main, ["config", "presets"])
    assert r.exit_code == 0 and r.output.split() == list(PRESETS)
