"""vtaforge: a hardware-software co-design suite for the VTA deep-learning accelerator.

The import package ``vtaforge`` holds the subpackages ``hw`` (config, ISA, Amaranth core),
``compiler``, ``runtime`` and ``dse``; see the repository's DESIGN notes.
"""

__version__ = "0.1.0"

from .hw.config import VTAConfig, load_config, preset  # noqa: E402,F401
