"""The commands' input boundary: every file a command reads (``.npy``/``.npz`` data, config
and other ``.json``, ``.onnx`` models, ``.vtapkg`` artifacts, exec bundles) is read here, and
every decode or size error becomes one :class:`InputError` naming the file and the cause
(one ``error:`` line, exit status 2), never numpy's, protobuf's or json's own exception.

- :func:`read_array`: a ``.npy`` array or a ``.npz`` archive (``{input: array}``), told apart
  by content; every header is checked before anything is allocated
  (:mod:`vtaforge.runtime.npz`): a corrupt member (bad CRC), a truncated file, an object
  array, a header declaring more than the file holds or than the machine's memory.
- :func:`read_json`: UTF-8 JSON text (non-UTF-8 bytes, nesting too deep for the parser).
- :func:`read_config`: a preset name or a ``vta_config.json``.
- :func:`read_onnx`: an ONNX model, its inputs, and a refusal of operators in a domain that
  neither vtaforge nor onnxruntime implements.
- :func:`read_artifact`, :func:`read_bundle`: a ``.vtapkg``, an exec bundle.
- :func:`check_arity`: one array for a model of several inputs, named.
- :func:`compiling`: a CPU kernel's refusal while compiling (calibration runs the float
  model on the data: a Gather index out of range) as one line naming the data.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import click

__all__ = ["InputError", "agreement_option", "check_agreement", "check_regular", "read_array",
           "read_json", "check_json_lines",
           "read_config", "read_onnx", "OnnxInfo",
           "read_artifact", "read_bundle", "check_arity", "compiling"]

#: Operator domains a model's nodes may use: the ONNX standard ones (vtaforge's importer and
#: onnxruntime) and onnxruntime's contrib domains.  A node of any other domain (that the model
#: does not define as a local function) has no implementation anywhere.
KNOWN_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training",
                           "ai.onnx.training", "com.microsoft", "com.microsoft.nchwc",
                           "com.microsoft.experimental", "com.ms.internal.nhwc"})

#: The largest JSON file read (a config, space or timing table is kilobytes, a DSE report
#: of thousands of points megabytes).
MAX_JSON_BYTES = 256 << 20


class InputError(click.ClickException):
    """An unusable input file: one ``error:`` line naming it and the cause, exit status 2."""

    exit_code = 2


def _one_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def _os_reason(e: OSError) -> str:
    from ..runtime.npz import os_reason

    return os_reason(e)


#: The largest ONNX model read: protobuf refuses a message over 2 GiB (larger weights live in
#: external data files, which onnx reads itself).
MAX_ONNX_BYTES = 2 << 30


def agreement_option(f):
    """The ``--agreement-target COSINE`` option of the commands that compile an ONNX model:
    the output agreement with float (mean cosine on the calibration samples, in (0, 1])
    under which more layers are kept float on the CPU (``QuantConfig.agreement_target``,
    default 0.99); ``None`` where not given."""
    def no_nan(ctx, param, value):
        if value is not None and value != value:       # FloatRange lets NaN through
            raise click.BadParameter("nan is not in the range 0<x<=1.")
        return value
    return click.option(
        "--agreement-target", "agreement_target", default=None, callback=no_nan,
        type=click.FloatRange(min=0, max=1, min_open=True),
        help="output agreement with float (cosine on the calibration samples, in (0, 1]; "
             "default 0.99) below which more layers are kept float on the CPU: higher "
             "trades VTA layers for accuracy (ONNX models)")(f)


def check_agreement(model_path: str, agreement_target) -> None:
    """Refuse ``--agreement-target`` for a ``.vtapkg`` (already quantized).

    Raises:
        InputError: a target given with a ``.vtapkg``."""
    if agreement_target is not None and Path(model_path).suffix == ".vtapkg":
        raise InputError("--agreement-target applies to ONNX models; a .vtapkg is already "
                         "quantized (recompile it with vtaforge compile --agreement-target)")


def check_regular(path, what: str, exc: type[Exception] = InputError) -> None:
    """Refuse an existing ``path`` that is not a regular file or a directory (a FIFO, a
    device such as ``/dev/zero``, a socket) before anything opens it: opening a FIFO blocks
    until a writer comes, and reading a device may never end.  A missing file or a directory
    is left to the reader, whose message names it.

    Raises:
        exc: ``"<what> '<path>' is not a regular file (a FIFO or a device)"``.
    """
    import os
    import stat

    try:
        mode = os.stat(str(path)).st_mode
    except (OSError, ValueError):
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise exc(f"{what} {str(path)!r} is not a regular file (a FIFO or a device); give "
                  f"a file")


def read_array(path: str, what: str = "input"):
    """A ``.npy`` array, or for a ``.npz`` archive ``{name: array}`` (one array per model
    input, keyed by the input's name).

    Args:
        path: the file; what: what it is, for messages (``"input"``,
            ``"calibration data"``).
    Raises:
        InputError: missing or unreadable file, neither ``.npy`` nor ``.npz``, damaged
            (bad CRC, truncated, bad header), an object array, an array declaring more bytes
            than the file holds or than this machine's memory, an empty archive.
    """
    from ..runtime.npz import load_array

    check_regular(path, what)
    return load_array(path, what, InputError)


def read_json(path: str, what: str) -> Any:
    """The JSON value in ``path``.

    Raises:
        InputError: unreadable file, larger than :data:`MAX_JSON_BYTES`, not UTF-8 text
            (the offset of the first bad byte), nested too deeply for the parser, not JSON.
    """
    import os
    import stat

    p = str(path)
    check_regular(p, what)
    try:
        with open(p, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):    # /dev/zero, a FIFO
                raise InputError(f"{what} {p!r} is not a regular file")
            data = f.read(MAX_JSON_BYTES + 1)
    except OSError as e:
        raise InputError(f"cannot read {what} {p!r}: {_os_reason(e)}") from None
    if len(data) > MAX_JSON_BYTES:
        raise InputError(f"{what} {p!r} is larger than {MAX_JSON_BYTES >> 20} MiB; not a "
                         f"JSON file vtaforge reads")
    from ..hw.config import decode_json

    return decode_json(data, f"{what} {p!r}", InputError)


def check_json_lines(path: str, what: str, advice: str = "") -> None:
    """Check that a JSON-lines file (a cache) is UTF-8 text whose lines a JSON parser can
    take without exhausting its recursion (a torn or malformed line is left to its reader).
    A missing file passes (it is created).

    Raises:
        InputError: unreadable, not UTF-8 text, or a line nested too deeply to parse;
            ``advice`` (``"; delete it to start over"``) ends the line.
    """
    p = Path(path)
    if not p.exists():
        return
    check_regular(p, what)
    if p.is_file() and p.stat().st_size > MAX_JSON_BYTES * 4:
        raise InputError(f"{what} {str(p)!r} is larger than {MAX_JSON_BYTES * 4 >> 20} MiB; "
                         f"not a cache vtaforge wrote{advice}")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {what} {str(p)!r}: {_os_reason(e)}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{what} {str(p)!r} is not a text file (byte 0x{data[e.start]:02x} "
                         f"at offset {e.start} is not UTF-8){advice}") from None
    for n, line in enumerate(text.splitlines(), start=1):
        try:
            json.loads(line)
        except ValueError:
            pass
        except RecursionError:
            raise InputError(f"{what} {str(p)!r}: line {n} is nested too deeply to "
                             f"parse{advice}") from None


def read_config(spec: str | None):
    """A :class:`~vtaforge.hw.config.VTAConfig` from a preset name or a config file
    (``None``: ``pynq``); :func:`~vtaforge.hw.config.load_config`, whose file reader
    refuses non-UTF-8 and too deeply nested JSON in one line as :func:`read_json` does.

    Raises:
        ConfigError: neither a preset nor a valid config file (one line naming the file and
            the key or the cause).
    """
    from ..hw.config import ConfigError, load_config

    if spec is not None:
        check_regular(spec, "config file", ConfigError)
    return load_config(spec)


@dataclass(frozen=True)
class OnnxInfo:
    """What :func:`read_onnx` learnt of a model: its path and its graph inputs (the
    initializers excluded), in order."""

    path: str
    inputs: tuple[str, ...]


def _domain_nodes(graph, functions: set) -> Iterator[tuple[Any, str]]:
    """``(node, domain)`` of every node of ``graph`` and its sub-graphs whose domain no
    implementation knows (not :data:`KNOWN_DOMAINS`, not a model-local function)."""
    for node in graph.node:
        dom = node.domain or ""
        if dom not in KNOWN_DOMAINS and (dom, node.op_type) not in functions:
            yield node, dom
        for a in node.attribute:
            if a.HasField("g"):
                yield from _domain_nodes(a.g, functions)
            for g in a.graphs:
                yield from _domain_nodes(g, functions)


def read_onnx(path: str, what: str = "model") -> OnnxInfo:
    """Check that ``path`` is an ONNX model vtaforge can take, before compiling it.

    Raises:
        InputError: missing, unreadable or empty file, not an ONNX model (protobuf cannot
            parse it, or no graph), or a node in an operator domain that neither vtaforge
            nor onnxruntime implements (named with its op type and domain).
    """
    p = str(path)
    check_regular(p, what)
    try:
        if Path(p).is_file() and Path(p).stat().st_size > MAX_ONNX_BYTES:
            raise InputError(f"{what} {p!r} is larger than 2 GiB, the most an ONNX model "
                             f"file can hold (protobuf's limit; larger weights go in "
                             f"external data files)")
        data = Path(p).read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {what} {p!r}: {_os_reason(e)}") from None
    if not data:
        raise InputError(f"{what} {p!r} is an empty file, not an ONNX model")
    try:
        import onnx
    except ImportError:
        return OnnxInfo(p, ())          # the compiler reports the missing extra
    try:
        m = onnx.ModelProto()
        m.ParseFromString(data)
    except Exception as e:  # noqa: BLE001 - protobuf raises several types
        raise InputError(f"{what} {p!r} is not an ONNX model (protobuf: "
                         f"{_one_line(e)})") from None
    if not m.HasField("graph") or len(m.graph.node) == 0:
        raise InputError(f"{what} {p!r} is not an ONNX model (no graph or no nodes)")
    if len(m.graph.output) == 0:
        raise InputError(f"{what} {p!r} has no graph outputs: nothing to compute")
    functions = {(f.domain, f.name) for f in m.functions}
    bad = list(_domain_nodes(m.graph, functions))
    if bad:
        node, dom = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        who = f"node {node.name!r} ({node.op_type})" if node.name else f"a {node.op_type} node"
        raise InputError(f"{what} {p!r}: {who} is in operator domain {dom!r}{more}, which "
                         f"neither vtaforge nor onnxruntime implements")
    inits = {t.name for t in m.graph.initializer}
    inputs = tuple(i.name for i in m.graph.input if i.name not in inits)
    if not inputs:
        raise InputError(f"{what} {p!r} has no graph inputs (its outputs are constants): "
                         f"nothing to calibrate or feed; vtaforge compiles models that take "
                         f"an input")
    return OnnxInfo(p, inputs)


def read_artifact(path: str, config=None):
    """A ``.vtapkg`` (:func:`~vtaforge.runtime.artifact.load_artifact`; its errors are one
    line naming the file)."""
    from ..runtime.artifact import ArtifactError, load_artifact

    check_regular(path, "artifact", ArtifactError)
    return load_artifact(path, config)


def read_bundle(path: str, config=None):
    """``(dram, insn_addr, insn_count)`` of an exec bundle, every member's header and CRC
    checked first (:func:`~vtaforge.runtime.npz.check_npz`).

    Raises:
        BundleError: missing, damaged or malformed bundle, or one built for another config.
    """
    from ..runtime.bundle import BundleError, load_bundle
    from ..runtime.npz import check_npz

    check_regular(path, "bundle", BundleError)
    check_npz(path, "bundle", BundleError)
    return load_bundle(path, config=config)


def check_arity(x, path: str, what: str, inputs) -> None:
    """Refuse one array (a ``.npy``) for a model of several inputs, naming them.

    Raises:
        InputError: ``"<what> '<path>' is one array, but the model has 2 inputs (a, b):
            give a .npz with one array per input, named a, b"``.
    """
    inputs = list(inputs)
    if len(inputs) > 1 and not isinstance(x, dict):
        names = ", ".join(inputs)
        raise InputError(f"{what} {path!r} is one array, but the model has {len(inputs)} "
                         f"inputs ({names}): give a .npz with one array per input, named "
                         f"{names}")


@contextlib.contextmanager
def compiling(model: str, data_label: str) -> Iterator[None]:
    """Map a CPU kernel's refusal while compiling ``model`` (calibration runs the float
    model on the data: a Gather index out of range, onnxruntime refusing a node) to one
    :class:`InputError` naming the model and the data (``data_label``: ``"input 'x.npy'"``).
    """
    from ..runtime.float_common import CpuKernelError

    try:
        yield
    except CpuKernelError as e:
        raise InputError(f"model {model!r} cannot run on {data_label}: "
                         f"{_one_line(e)}") from None
