"""Board packages and deployment (``vtaforge board package`` / ``verify`` / ``deploy``), and
the board side that runs them.

A **board package** is one self-contained folder for one board (:func:`make_package`)::

    overlay/vta.bit, overlay/vta.hwh   the PYNQ overlay (same base name, side by side)
    overlay/vta.json                   the bitstream's fingerprint, config and sha256
    config.json                        the core's config (``VTAConfig.to_json``)
    models/NAME.vtapkg                 compiled models, each checked against the config
    wheel/vtaforge-*.whl               the vtaforge wheel (base install; pip --no-deps)
    verify.py                          checks every file against manifest.json (stdlib only)
    run.sh                             verify / install / run a model (POSIX sh)
    vtaforge.ipynb                     the same steps as Jupyter cells
    README.md                          how to use it
    manifest.json                      sha256 and size of every other file, fingerprints

The manifest's ``files`` (what the board runs: overlay, config, models, wheel, verify.py,
run.sh) are checked before anything is installed or run; its ``user_files`` (the notebook,
which Jupyter saves, and the README) are not: ``verify`` notes when they changed.

Fingerprints.  Each ``.vtapkg`` records the config it was compiled for
(:func:`~vtaforge.runtime.artifact.load_artifact` refuses another one).  A bitstream
carries its config's fingerprint only inside the core (the read-only ``FINGERPRINT``
register, read on the board) -- neither the ``.bit`` nor the ``.hwh`` holds it -- so the
package takes it from a JSON file that travels with the bitstream (:func:`find_bitstream_info`):

1. the sidecar ``NAME.json`` beside ``NAME.bit`` (written by ``vtaforge board build``:
   config, fingerprint, sha256 of the ``.bit`` and ``.hwh``, the timing verdict), else
2. the ``board.json`` of the Vivado project (written by ``vtaforge board project``) whose
   ``bitstream`` entry is this file (``PROJECT/out/vta.bit``), else
3. a file named by ``--bitstream-info``.

Either must give the config's fingerprint.  A ``UserID`` in the ``.bit`` header other than
``0xFFFFFFFF`` (Vivado's ``BITSTREAM.CONFIG.USERID``) must equal it too.  The ``.bit``
header's part, the ``.hwh``'s device, PS and PL clock must match the config, and the
``.hwh`` must hold the ``vta_wrapper`` module.

**Deploy** (:func:`deploy`) copies a package to ``USER@HOST`` with ``rsync`` (or ``scp
-r``) over ``ssh``, runs ``sh run.sh install`` there (verify, then ``pip install --no-deps``
of the wheel), optionally ``sh run.sh run`` on an input, and fetches ``output.npy``,
``stats.json`` and ``run.log``.  Every external command runs through :mod:`subprocess` with
a timeout; every failure is a :class:`DeployError` with a one-line message.

Test hooks of ``run.sh`` and the notebook (environment variables, unset on a board):
``VTAFORGE_RUN_TARGET`` (run on this target instead of ``pynq``, e.g. ``fsim``: no board),
``VTAFORGE_SKIP_INSTALL=1`` (vtaforge is already importable: no pip), ``VTAFORGE_PYTHON``
(the Python to use) and ``VTAFORGE_PYNQ_VENV`` (the venv to activate, default
``/usr/local/share/pynq-venv``).

Board side, ``python -m vtaforge.runtime.board run ...`` runs a model (:func:`run_model`:
what ``vtaforge run`` does, without click, which a board image may lack) and ``python -m
vtaforge.runtime.board stats ...`` writes the run's statistics; ``run.sh`` calls both and
the notebook imports no click either.  This package needs only numpy, ``hw`` and
``runtime``: never the compiler or click.

Modules: :mod:`.bitstream` (``.bit``/``.hwh`` checks), :mod:`.wheel` (the wheel a package
carries), :mod:`.package` (write and verify a package), :mod:`.texts` (its ``verify.py``,
``run.sh``, notebook and README), :mod:`.remote` (deploy over ssh), :mod:`.run` (the board
side).
"""


from ._common import PACKAGE_FORMAT, SIDECAR_FORMAT, DeployError
from .bitstream import check_bitstream, find_bitstream_info, read_bit_header, read_hwh, write_bitstream_sidecar
from .package import PackageResult, make_package, verify_package
from .remote import DeployResult, deploy
from .run import main, run_model, run_stats
from .wheel import build_wheel, check_wheel, installed_wheel, source_tree

__all__ = ["DeployError", "PACKAGE_FORMAT", "SIDECAR_FORMAT", "read_bit_header", "read_hwh",
           "find_bitstream_info", "check_bitstream", "write_bitstream_sidecar",
           "source_tree", "build_wheel", "installed_wheel", "check_wheel", "make_package",
           "PackageResult", "verify_package", "deploy", "DeployResult", "run_model", "run_stats",
           "main"]
