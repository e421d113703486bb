"""vtaforge: a hardware-software co-design suite for the VTA deep-learning accelerator.

The import package ``vtaforge`` holds the subpackages ``hw`` (config, ISA, Amaranth core),
``compiler``, ``runtime`` and ``dse``; see the repository's README.md and docs/.

The base install (``pip install vtaforge``: numpy, click, tqdm, threadpoolctl) is what a
board needs: ``hw`` (less the Amaranth core, ``hw.core``) and ``runtime`` import without
the extras.  ``compiler`` and ``dse`` need the ``compiler`` extra (onnx, onnxruntime,
scikit-learn), the Amaranth core and the RTL tools the ``hw`` extra.
"""

from pathlib import Path as _Path

__version__ = "0.1.0"

# In a source checkout the subpackages are the top-level folders hw/, compiler/, runtime/
# and dse/ (pyproject maps them into this package when installed).  When this folder is
# imported straight from a checkout (e.g. `python -m pytest` run from the repository root,
# which puts the root first on sys.path), let the checkout's root serve as a second search
# path so that `vtaforge.hw` finds ../hw.  An installed package never takes this branch.
_root = _Path(__file__).resolve().parent.parent
if (_root / "pyproject.toml").is_file() and (_root / "hw" / "config.py").is_file():
    __path__.append(str(_root))  # type: ignore[name-defined]  # noqa: F821

from .hw.config import VTAConfig, load_config, preset  # noqa: E402,F401
