"""Build both editions of the book: the English at ``_build/html``, the Chinese (``zh/``) at ``_build/html/zh``.

    .venv/bin/python _ext/build_books.py [--keep-going]      (what `make book` runs)

Each chapter is executed once. The execution cache (``_build/.jupyter_cache``) is emptied
first, so the English build executes every chapter, as a build from scratch does, and stores
each one's outputs there. The Chinese pages run the same code cells in the same order
(``tests/book/test_editions.py`` fails when they do not), and jupyter-cache matches a
notebook by its code cells: the Chinese build finds every chapter's outputs in the cache and
prints the same numbers and figures. A Chinese page whose code differs would be executed
there, and its test fail. Warnings are errors in both builds.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The Chinese edition's folder (a book of its own) and where its pages are served, under the English site.
CHINESE, SERVED_AT = "zh", "zh"
#: Where the site is written, relative to the repository: jupyter-book's own place for the English book.
SITE = "_build/html"


class BuildFailed(Exception):
    """A book did not build; the message holds the end of jupyter-book's output."""


def build(root: Path = ROOT, *, keep_going: bool = False, capture: bool = True) -> Path:
    """Build the English book of ``root`` and its Chinese edition; return the site's folder (``_build/html``).

    ``capture``: keep jupyter-book's output for the error (the tests), else let it print (``make book``).
    """
    shutil.rmtree(root / "_build" / ".jupyter_cache", ignore_errors=True)  # every chapter executed afresh
    flags = ["--warningiserror", "--nitpick"] + (["--keep-going"] if keep_going else [])
    jupyter_book = str(Path(sys.executable).parent / "jupyter-book")
    _run([jupyter_book, "build", str(root), *flags], root, capture)
    # run from zh/, whose _config.yml names the English build's cache relative to it
    chinese_output = root / "_build" / CHINESE
    _run([jupyter_book, "build", ".", "--path-output", str(chinese_output), *flags], root / CHINESE, capture)
    site = root / SITE
    shutil.rmtree(site / SERVED_AT, ignore_errors=True)
    shutil.copytree(chinese_output / "_build" / "html", site / SERVED_AT)
    return site


def _run(command: list[str], cwd: Path, capture: bool) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=capture, text=True)
    if result.returncode != 0:
        said = f"{result.stdout[-5000:]}\n{result.stderr[-5000:]}" if capture else "(its output is above)"
        raise BuildFailed(f"{' '.join(command[1:3])} in {cwd} failed:\n{said}")


def main() -> None:
    parser = argparse.ArgumentParser(description="Build the English book and its Chinese edition.")
    parser.add_argument("--keep-going", action="store_true", help="report every warning before failing")
    args = parser.parse_args()
    try:
        site = build(keep_going=args.keep_going, capture=False)
    except BuildFailed as failure:
        raise SystemExit(str(failure)) from None
    print(f"the English book: {site / 'index.html'}; the Chinese edition: {site / SERVED_AT / 'index.html'}")


if __name__ == "__main__":
    main()
