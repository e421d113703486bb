"""``vtaforge disasm FILE``: print a program one instruction per line with the running
token balance of the four dependency queues.

FILE is recognised by its content, not its name: a zip archive is an exec bundle (``.npz``),
a ``.npy`` file must hold a 1-D ``uint8`` array (the program bytes, read like a ``.bin``;
any other array is refused rather than its header being disassembled), anything else is a
raw ``.bin`` of 16-byte instructions.  Like ``exec``, an empty program (count 0), a negative
address or count, and an address that is not a multiple of 16 are errors.
"""

from __future__ import annotations

import click

_ZIP_MAGIC = b"PK\x03\x04"
_NPY_MAGIC = b"\x93NUMPY"


def _read_raw(file: str):
    """The bytes of a .bin, or the uint8 program array of a .npy.  Raises BundleError."""
    import os
    import stat

    import numpy as np

    from ..runtime.bundle import BundleError
    from ..runtime.npz import load_npy, os_reason

    try:
        with open(file, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):    # /dev/zero, a FIFO: never read to the end
                raise BundleError(f"{file!r} is not a regular file (a .bin, .npy or .npz "
                                  f"program)")
            head = f.read(len(_NPY_MAGIC))
            if head != _NPY_MAGIC:
                f.seek(0)
                return np.frombuffer(f.read(), dtype=np.uint8)
    except OSError as e:
        raise BundleError(f"cannot read {file!r}: {os_reason(e)}") from None
    arr = load_npy(file, "program", BundleError)
    if arr.dtype != np.uint8 or arr.ndim != 1:
        raise BundleError(f"{file!r} is a .npy array of dtype {arr.dtype} and shape "
                          f"{list(arr.shape)}, not a program (a 1-D uint8 array of 16-byte "
                          f"instructions, a raw .bin or an exec bundle .npz)")
    return np.ascontiguousarray(arr)


@click.command("disasm")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--config", "config_spec", default="pynq", show_default=True,
              help="preset name or vta_config.json file")
@click.option("--insn-addr", type=int, default=None,
              help="byte offset of the first instruction, a multiple of 16 (default: the "
                   "bundle's, or 0)")
@click.option("--insn-count", type=int, default=None,
              help="instructions to show, >= 1 (default: the bundle's, or the rest of the "
                   "file)")
def disasm(file: str, config_spec: str, insn_addr: int | None, insn_count: int | None) -> None:
    """Disassemble FILE: a raw .bin of 16-byte instructions, a .npy uint8 array of them, or
    an exec bundle .npz."""
    from ..hw.isa import INSN_BYTES, disassemble
    from ..runtime.bundle import BundleError
    from ._inputs import check_regular, read_bundle, read_config

    cfg = read_config(config_spec)
    check_regular(file, "program", BundleError)
    try:
        with open(file, "rb") as f:
            is_zip = f.read(len(_ZIP_MAGIC)) == _ZIP_MAGIC
    except FileNotFoundError:
        is_zip = file.endswith(".npz")
    if is_zip or file.endswith(".npz"):
        data, b_addr, b_count = read_bundle(file)
        addr = b_addr if insn_addr is None else insn_addr
        count = b_count if insn_count is None else insn_count
    else:
        data = _read_raw(file)
        addr = 0 if insn_addr is None else insn_addr
        if addr < 0:
            raise BundleError(f"{file!r}: insn_addr = {addr} is negative")
        if addr > data.size:
            raise BundleError(f"{file!r}: insn_addr = {addr} is past the end of its "
                              f"{data.size} bytes")
        if addr % INSN_BYTES:
            raise BundleError(f"{file!r}: insn_addr = 0x{addr:x} is not a multiple of "
                              f"{INSN_BYTES} bytes (instructions are fetched 16-byte aligned)")
        count = (data.size - addr) // INSN_BYTES if insn_count is None else insn_count
        if insn_count is None and (data.size - addr) % INSN_BYTES:
            raise BundleError(f"{file!r}: {data.size - addr} bytes from offset {addr} is not a "
                              f"multiple of {INSN_BYTES} (one instruction)")
    if addr < 0:
        raise BundleError(f"{file!r}: insn_addr = {addr} is negative")
    if addr % INSN_BYTES:
        raise BundleError(f"{file!r}: insn_addr = 0x{addr:x} is not a multiple of "
                          f"{INSN_BYTES} bytes (instructions are fetched 16-byte aligned)")
    if count < 0:
        raise BundleError(f"{file!r}: insn_count = {count} is negative")
    if count == 0:
        raise BundleError(f"{file!r}: insn_count = 0: no instructions to disassemble (exec "
                          f"refuses an empty program too)")
    end = addr + count * INSN_BYTES
    if end > data.size:
        raise BundleError(f"{file!r}: instructions [{addr}, {end}) lie outside its "
                          f"{data.size} bytes")
    for line in disassemble(cfg, data[addr:end]):
        click.echo(line)


COMMANDS = [disasm]
