"""``python -m vtaforge.runtime.board run|stats|verify ...``: what ``run.sh`` calls on a
board (:func:`vtaforge.runtime.board.run.main`; no click)."""

import sys

from .run import main

sys.exit(main())
