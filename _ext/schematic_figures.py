"""Sphinx extension: the book draws its schematic figures (``book/figures/schematics.py``) before reading a page.

At the start of each edition's build, every figure of that edition whose file is missing or older
than its source (the drawing code and its labels) is drawn again, so the build makes every figure
it shows and a changed label reaches both editions. Figures already up to date are left alone: a
fresh clone holds them drawn, and builds without the Chinese font (``fonts-noto-cjk``), which only
drawing a Chinese figure needs.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

log = logging.getLogger(__name__)
SOURCE = Path(__file__).resolve().parents[1] / "book" / "figures" / "schematics.py"


def schematics():
    """The drawing module, loaded from its file (the book's folder is not a package)."""
    spec = importlib.util.spec_from_file_location("course_schematics", SOURCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def edition(app: Sphinx) -> str:
    """``zh`` for the Chinese book (``language: zh_CN``), else ``en``."""
    return "zh" if str(app.config.language or "").startswith("zh") else "en"


def draw_stale_figures(app: Sphinx) -> None:
    for path in schematics().render_stale(edition(app)):
        log.info(f"drew {path.name} again: its source changed")


def setup(app: Sphinx) -> dict:
    app.connect("builder-inited", draw_stale_figures)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
