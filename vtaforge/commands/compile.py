"""``vtaforge compile FILE.onnx -o MODEL.vtapkg``: compile a model to an artifact."""

from __future__ import annotations

import click
import numpy as np

from ._inputs import agreement_option

#: Samples of the default calibration (no ``--calibrate``): uniform random in [0, 1), of the
#: model's input shape; a fixed batch B takes whole batches (the next multiple of B).
DEFAULT_CALIB_SAMPLES = 16
#: The size the default calibration gives every other symbolic dimension (height, width).
DEFAULT_CALIB_DIM = 16


def default_calibration(shape) -> np.ndarray:
    """The default calibration of an input of ``shape`` (ints and symbolic names):
    :data:`DEFAULT_CALIB_SAMPLES` samples (rounded up to whole batches of a fixed batch),
    other symbolic dimensions :data:`DEFAULT_CALIB_DIM`; a scalar input: one value."""
    shape = list(shape)
    if shape:
        b = shape[0]
        shape[0] = (DEFAULT_CALIB_SAMPLES if not isinstance(b, int) or b < 1 else
                    b * -(-DEFAULT_CALIB_SAMPLES // b))
        shape[1:] = [d if isinstance(d, int) else DEFAULT_CALIB_DIM for d in shape[1:]]
    return np.random.default_rng(0).random(shape, dtype=np.float32)


@click.command("compile")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "output_path", required=True,
              help="artifact to write (.vtapkg)")
@click.option("--config", "config_spec", default="pynq", show_default=True,
              help="preset name or vta_config.json file")
@click.option("--calibrate", "calib_path", default=None,
              help=f"calibration .npy (float, batch first); default: "
                   f"{DEFAULT_CALIB_SAMPLES} uniform random samples in [0, 1) of the model's "
                   f"input shape (whole batches of a fixed batch; other symbolic dimensions "
                   f"{DEFAULT_CALIB_DIM})")
@agreement_option
@click.option("--explain", is_flag=True, default=False,
              help="print each VTA conv/dense layer's lowering plan (tiling, input "
                   "placement, ACC regions and resets, weight streaming, the last tile's "
                   "stream), one block per layer")
def compile_cmd(model: str, output_path: str, config_spec: str, calib_path,
                agreement_target: float | None = None, explain: bool = False) -> None:
    """Compile MODEL (ONNX) for a VTA config and write a .vtapkg artifact."""
    from ..compiler.compile import compile_model
    from ..compiler.errors import CompileError
    from ..compiler.onnx_frontend import import_onnx
    from ..runtime.artifact import save_artifact
    from ._inputs import check_arity, compiling, read_array, read_config, read_onnx
    from ._output import check_output_path

    cfg = read_config(config_spec)
    check_output_path(output_path, "-o/--output")
    info = read_onnx(model)
    if calib_path:
        calib = read_array(calib_path, "calibration data")
        check_arity(calib, calib_path, "calibration data", info.inputs)
        data = f"calibration data {calib_path!r}"
    else:
        g = import_onnx(model)
        if len(g.inputs) != 1:
            raise CompileError(f"a model with several inputs ({', '.join(g.inputs)}) needs "
                               f"--calibrate DATA.npz with one array per input, named "
                               f"{', '.join(g.inputs)}")
        calib = default_calibration(g.types[g.inputs[0]].shape)
        data = f"uniform random calibration data of shape {list(calib.shape)}"
    with compiling(model, data):
        cm = compile_model(model, calib, cfg, calib_label=data,
                           agreement_target=agreement_target)
    save_artifact(cm, output_path)
    click.echo("placement:")
    click.echo(cm.placement_table())
    nv = sum(1 for s in cm.steps if s.target == "vta")
    if explain:
        _explain(cm)
    click.echo(f"{cm.name}: {nv}/{len(cm.steps)} steps on VTA for {cfg.bitstream_name} "
               f"(fingerprint 0x{cfg.fingerprint:08x}) -> {output_path}")


def _explain(cm) -> None:
    """Print the conv plan of every VTA-placed conv / dense step of ``cm``."""
    from ..compiler.lower_conv import explain_node

    nodes = {n.name: n for n in cm.qgraph.nodes}
    steps = [s for s in cm.steps if s.target == "vta" and s.op in ("qconv2d", "qdense")]
    click.echo(f"conv plans ({len(steps)} layer(s)):")
    for s in steps:
        click.echo(explain_node(cm.config, cm.qgraph, nodes[s.name]))


COMMANDS = [compile_cmd]
