"""build.tcl is byte-identical to what the string-building ``build_tcl`` emitted before it
became a template (hw/build.tcl.in, issue 23 item 3): the sha256 of each case below was
recorded from the old function at commit 4cd5910, for every board of hw/parts.py (with and
without a board part, other options, another clock), every preset and the generic Zynq-7000
and UltraScale+ boards.  A deliberate change of the script updates these hashes."""

from __future__ import annotations

import hashlib

import pytest

from vtaforge.hw.config import PRESETS, preset
from vtaforge.hw.parts import BOARDS
from vtaforge.hw.vivado import build_tcl

#: case -> sha256 of build_tcl's text, recorded before the template.
PINNED = {
    "preset=pynq": "50673af1391e7f5aa1949f82a19f8cef00baa628c38e97f7ea7eca8699f1589f",
    "preset=ultra96": "34dc2ab0b7ca7b3309497a768b856ca8bfac3195d2a72cfc3d2d734cada9fec3",
    "preset=zcu104": "3a46a88c0bb6a420ffb59267b18aea95ac25d95eb7b71ff5f9f5e34e74fc7ad8",
    "preset=tiny": "65877a92d466c756c1618c8fbfeafcd10fd9d6d2ebe6a75da61e8690d4a6a0f5",
    "preset=batch2": "f7d512e59fb65d5990ab584a97b45ce16b535dca643b0ad5cc2c767b52b99628",
    # presets that came after the template: recorded from it (commits fe857b3, and the
    # Ultra96-V2 / ZCU104 fast cores' commit)
    # pynq-fast with DMA_OUTSTANDING 4 (branch h-lat): its bitstream name, so its project
    # name in the script, gained "_dma4"; was f187f99f...643e8c; then with DEPTHWISE_TAPS 3
    # "_dw3" and the fingerprint in the header comment (0x04ef518b -> 0x96d62d78), nothing
    # else; was ce69bd39...763808; then with REQ_LANE_SHIFT "_lane" and the fingerprint
    # (0x96d62d78 -> 0xb9e35c21), nothing else; was 4fc32703...ce1d4c; then with LOAD_AHEAD
    # "_ahead" and the fingerprint (-> 0xa3b7d0b8), nothing else; was 4fcbfe8a...e729bf
    "preset=pynq-fast": "1035d0884ed844fe58faa6edb8262cb1268f5213b4e6626dd4c2925c15fe426d",
    "preset=ultra96-fast": "b1b8d75b4f7cdfc4acb17842958cbad25efbf8e36caead325060492ea8016abc",
    "preset=zcu104-fast": "eb917e3a380b5e22fc8cd847771444539037e4adfa3c3f37337983c6e5191f7b",
    "board=pynq-z1": "7622fe4b0e177308560b021ef24535ebd63e391a7f0f0650320a4a2ed491050b",
    "board=pynq-z1,board_part": "bff8c3dcc830b23ceda900d694054caeef2b462f882672880ecb022983b3f68a",
    "board=pynq-z1,opts": "3cd677ec87e1d6b4aef4e618fed87e8646ae342d8ef61bab216462541b19af82",
    "board=pynq-z1,clk": "c85096a43f46da559e1783ca42a1768e116873aea7c6b52efb483e8a88db1aae",
    "board=pynq-z2": "2b401474582c476402cd35fbc47f96566dc940e33aa83584e9fe60500c623786",
    "board=pynq-z2,board_part": "62ccf79f2e8e6f5b458480b2b54bb3dedd68aba7d414a55e926ee4905e704ff8",
    "board=pynq-z2,opts": "6e28735a03c23d65debc383dc5504cd4bf9e6280d505f51a1c6caadc7e3efec9",
    "board=pynq-z2,clk": "aa5ca399160453ebd4dd23631137661a527f3ffaa2f28575e85f83de6bd72ebd",
    "board=ultra96-v2": "ff331b2b8af6ef9e81a7c71853aecec75857162b9538d21a0b10fe1ab3360965",
    "board=ultra96-v2,board_part": "53f071eda5806733fddc94b260452759113dfd3a8d41d36ad5dfdf23c7df1876",
    "board=ultra96-v2,opts": "1969471a38dcc823f5f7c20ccb2cfef615d06bad1918646a1bf94d5d216ca8ef",
    "board=ultra96-v2,clk": "541dc2231df663760ca3e27f048d8a20e96c6031c77131e191e263eafa2eefbc",
    "board=zcu104": "3a46a88c0bb6a420ffb59267b18aea95ac25d95eb7b71ff5f9f5e34e74fc7ad8",
    "board=zcu104,board_part": "5a2feae19bcf51f345be469bb51037207bd7789ea00cdd8ac8cd182df9eb9486",
    "board=zcu104,opts": "4e51f013929fa3fdb95be0e41958a6f031a7e45527c76ed015b0032e438d5fd4",
    "board=zcu104,clk": "eeae9df7cec0650c9a08b2b29e2913da0d6c2bb6377710b9bf8bb9e657875e13",
    "generic7,board_part": "f6ef0acb838a5282f528390584151f09ce7c4122c185b82ca51065b47822ecc3",
    "genericmp": "dd14b12390ae5b4445162c2580bcb6322be1cabe80f31f29c3b5b935b0e696c5",
    "genericmp,board_part": "df79cc68d31a350f20ee5225f1edeb40605e33d1204821939dd22514c5171974",
}


def _cases():
    for p in PRESETS:
        yield f"preset={p}", preset(p), {}
    for name, b in BOARDS.items():
        cfg = preset(b.preset).replace(PART=b.part)
        yield f"board={name}", cfg, {"board": name}
        yield (f"board={name},board_part", cfg,
               {"board": name, "board_part": f"xilinx.com:{b.board_ids[0]}:part0:1.0"})
        yield (f"board={name},opts", cfg.replace(CLOCK_MHZ=142.857),
               {"board": name, "jobs": 7, "core_file": "c.v", "wrapper_file": "w.v",
                "overlay_name": "ov"})
        yield f"board={name},clk", cfg.replace(CLOCK_MHZ=250.0), {"board": name}
    z7 = preset("pynq").replace(TARGET="sim", PART="xc7z010clg400-1")
    zmp = preset("zcu104").replace(TARGET="sim", PART="xczu9eg-ffvb1156-2-e")
    yield "generic7,board_part", z7, {"board_part": "x.com:y:part0:1.0"}
    yield "genericmp", zmp, {}
    yield "genericmp,board_part", zmp, {"board_part": "x.com:y:part0:1.0"}


CASES = list(_cases())


def test_every_board_and_preset_is_pinned():
    assert {k for k, _, _ in CASES} == set(PINNED)
    assert {k.split(",")[0][len("board="):] for k in PINNED if k.startswith("board=")} == set(BOARDS)


@pytest.mark.parametrize("key,cfg,kw", CASES, ids=[k for k, _, _ in CASES])
def test_build_tcl_is_byte_identical_to_the_string_built_one(key, cfg, kw):
    text = build_tcl(cfg, **kw)
    assert hashlib.sha256(text.encode()).hexdigest() == PINNED[key]
    assert "@{" not in text and "\x00" not in text
