"""``vtaforge disasm FILE``: print a program one instruction per line with the running
token balance of the four dependency queues."""

from __future__ import annotations

import click


@click.command("disasm")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--config", "config_spec", default="pynq", show_default=True,
              help="preset name or vta_config.json file")
@click.option("--insn-addr", type=int, default=None,
              help="byte offset of the first instruction (default: the bundle's, or 0)")
@click.option("--insn-count", type=int, default=None,
              help="instructions to show (default: the bundle's, or the rest of the file)")
def disasm(file: str, config_spec: str, insn_addr: int | None, insn_count: int | None) -> None:
    """Disassemble FILE: a raw .bin of 16-byte instructions or an exec bundle .npz."""
    import numpy as np

    from ..hw.config import load_config
    from ..hw.isa import INSN_BYTES, disassemble
    from ..runtime.bundle import BundleError, load_bundle

    cfg = load_config(config_spec)
    if file.endswith(".npz"):
        data, b_addr, b_count = load_bundle(file)
        addr = b_addr if insn_addr is None else insn_addr
        count = b_count if insn_count is None else insn_count
    else:
        try:
            data = np.fromfile(file, dtype=np.uint8)
        except FileNotFoundError:
            raise BundleError(f"cannot read {file!r}: no such file") from None
        addr = 0 if insn_addr is None else insn_addr
        count = (data.size - addr) // INSN_BYTES if insn_count is None else insn_count
        if insn_count is None and (data.size - addr) % INSN_BYTES:
            raise BundleError(f"{file!r}: {data.size - addr} bytes from offset {addr} is not a "
                              f"multiple of {INSN_BYTES} (one instruction)")
    end = addr + count * INSN_BYTES
    if addr < 0 or count < 0 or end > data.size:
        raise BundleError(f"{file!r}: instructions [{addr}, {end}) lie outside its "
                          f"{data.size} bytes")
    for line in disassemble(cfg, data[addr:end]):
        click.echo(line)


COMMANDS = [disasm]
