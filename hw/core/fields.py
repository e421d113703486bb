"""Typed views of instructions and the token handshake, derived from ``hw/isa.py``.

The units read instruction fields through :mod:`amaranth.lib.data` layouts generated from
the ISA's field tables (:func:`vtaforge.hw.isa.isa_layout`), never through literal bit
slices: :func:`insn_layout` is the 128-bit ``StructLayout`` of one format (``mem``,
``gemm``, ``alu``, ``finish``; the gaps of upstream's C bit-field packing are padding
members), :func:`header_view` the common header (opcode and the four dependency flags).

Which token queues a unit pops and pushes, and with which header flag, comes from
:data:`vtaforge.hw.isa.TOKEN_ROUTES`: :func:`token_members` gives a unit's token ports
(``<queue>_nonempty``/``<queue>_pop`` for a queue it consumes, ``<queue>_has_room``/
``<queue>_push`` for one it produces), :func:`tokens_ready`, :func:`pop_tokens` and
:func:`push_tokens` the handshake, so no unit spells a flag's bit or its queue.
"""

from __future__ import annotations

from functools import lru_cache

from amaranth.hdl import Const, signed
from amaranth.lib import data
from amaranth.lib.wiring import In, Out

from ..config import INSN_BITS, VTAConfig
from ..isa import HEADER, Module, isa_layout, module_tokens

__all__ = ["insn_layout", "insn_view", "insn_field", "header_layout", "header_view",
           "token_members", "tokens_ready", "pop_tokens", "push_tokens", "pushes_any",
           "port_name"]


@lru_cache(maxsize=64)
def insn_layout(cfg: VTAConfig, fmt: str) -> data.StructLayout:
    """The ``INSN_BITS``-wide ``StructLayout`` of instruction format ``fmt`` of ``cfg``:
    one member per ISA field at its bit position (signed fields as signed shapes), and
    ``_gap<lsb>`` padding members for the unused bits."""
    members: dict = {}
    pos = 0
    for f in sorted(isa_layout(cfg).formats()[fmt], key=lambda f: f.lsb):
        if f.lsb > pos:
            members[f"_gap{pos}"] = f.lsb - pos
        members[f.name] = signed(f.width) if f.signed else f.width
        pos = f.lsb + f.width
    if pos < INSN_BITS:
        members[f"_gap{pos}"] = INSN_BITS - pos
    layout = data.StructLayout(members)
    assert layout.size == INSN_BITS
    return layout


def insn_view(cfg: VTAConfig, value, fmt: str) -> data.View:
    """``value`` (a 128-bit Amaranth value) viewed as format ``fmt``."""
    return data.View(insn_layout(cfg, fmt), value)


def insn_field(cfg: VTAConfig, insn, fmt: str, name: str):
    """Field ``name`` of format ``fmt`` (``mem``, ``gemm``, ``alu``) of a 128-bit
    instruction value, through :func:`insn_layout` (signed fields come out signed)."""
    return getattr(insn_view(cfg, insn, fmt), name)


@lru_cache(maxsize=1)
def header_layout() -> data.StructLayout:
    """The common header of every instruction (``hw.isa.HEADER``, from bit 0)."""
    return data.StructLayout({name: width for name, width in HEADER})


def header_view(value) -> data.View:
    """The header fields (``opcode``, ``pop_prev`` ... ``push_next``) of an instruction
    value."""
    return data.View(header_layout(), value[:header_layout().size])


def port_name(route, role: str) -> str:
    """A unit's token port for ``route`` (``nonempty``, ``pop``, ``has_room``, ``push``)."""
    return f"{route.queue.name.lower()}_{role}"


def token_members(module: Module) -> dict:
    """The token-port members of ``module``'s unit signature: ``<q>_nonempty`` (In) and
    ``<q>_pop`` (Out) per queue it consumes, ``<q>_has_room`` (In) and ``<q>_push`` (Out)
    per queue it produces."""
    pops, pushes = module_tokens(module)
    out = {}
    for r in pops:
        out[port_name(r, "nonempty")] = In(1)
        out[port_name(r, "pop")] = Out(1)
    for r in pushes:
        out[port_name(r, "has_room")] = In(1)
        out[port_name(r, "push")] = Out(1)
    return out


def tokens_ready(unit, module: Module, head):
    """True when the instruction whose header is ``head`` (a :func:`header_view`) can
    start in ``unit``: every token it pops is there and every queue it pushes to has
    room (a push needs room, DESIGN.md "Semantics")."""
    pops, pushes = module_tokens(module)
    ok = Const(1, 1)
    for r in pops:
        ok = ok & (~getattr(head, r.pop_flag) | getattr(unit, port_name(r, "nonempty")))
    for r in pushes:
        ok = ok & (~getattr(head, r.push_flag) | getattr(unit, port_name(r, "has_room")))
    return ok


def pop_tokens(unit, module: Module, head) -> list:
    """Statements popping the tokens ``head`` asks for (comb, in the accepting cycle)."""
    pops, _ = module_tokens(module)
    return [getattr(unit, port_name(r, "pop")).eq(getattr(head, r.pop_flag)) for r in pops]


def push_tokens(unit, module: Module, head) -> list:
    """Statements pushing the tokens ``head`` asks for (comb, in the finishing cycle)."""
    _, pushes = module_tokens(module)
    return [getattr(unit, port_name(r, "push")).eq(getattr(head, r.push_flag))
            for r in pushes]


def pushes_any(module: Module, head):
    """True when ``head`` asks ``module`` to push any token."""
    _, pushes = module_tokens(module)
    out = Const(0, 1)
    for r in pushes:
        out = out | getattr(head, r.push_flag)
    return out
