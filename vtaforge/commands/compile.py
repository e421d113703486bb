"""``vtaforge compile FILE.onnx -o MODEL.vtapkg``: compile a model to an artifact."""

from __future__ import annotations

import click
import numpy as np


@click.command("compile")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "output_path", required=True,
              help="artifact to write (.vtapkg)")
@click.option("--config", "config_spec", default="pynq", show_default=True,
              help="preset name or vta_config.json file")
@click.option("--calibrate", "calib_path", default=None,
              help="calibration .npy (float, batch first); default: 16 uniform random "
                   "samples in [0, 1) of the model's input shape (batch 1 if symbolic)")
def compile_cmd(model: str, output_path: str, config_spec: str, calib_path) -> None:
    """Compile MODEL (ONNX) for a VTA config and write a .vtapkg artifact."""
    from pathlib import Path

    from ..compiler.compile import compile_model
    from ..compiler.errors import CompileError
    from ..compiler.onnx_frontend import import_onnx
    from ..hw.config import load_config
    from ..runtime.artifact import save_artifact
    from .run import _load_npy

    from ._output import check_output_path

    cfg = load_config(config_spec)
    check_output_path(output_path, "-o/--output")
    if not Path(model).exists():
        raise CompileError(f"cannot read model {model!r}: no such file")
    if calib_path:
        calib = _load_npy(calib_path, "calibration data")
    else:
        g = import_onnx(model)
        if len(g.inputs) != 1:
            raise CompileError("a model with several inputs needs --calibrate")
        shape = [d if isinstance(d, int) else 16 for d in g.types[g.inputs[0]].shape]
        calib = np.random.default_rng(0).random(shape, dtype=np.float32)
    cm = compile_model(model, calib, cfg)
    save_artifact(cm, output_path)
    click.echo("placement:")
    click.echo(cm.placement_table())
    nv = sum(1 for s in cm.steps if s.target == "vta")
    click.echo(f"{cm.name}: {nv}/{len(cm.steps)} steps on VTA for {cfg.bitstream_name} "
               f"(fingerprint 0x{cfg.fingerprint:08x}) -> {output_path}")


COMMANDS = [compile_cmd]
