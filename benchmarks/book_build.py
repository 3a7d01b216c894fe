"""Build the book from scratch and print the execution seconds of each chapter.

    .venv/bin/python benchmarks/book_build.py      (or: make benchmark)

The book's sources are copied to a temporary folder and built there with a fresh
execution cache, so nothing is reused from an earlier build; the cache then holds each
notebook's execution time. Goals on 2 CPU cores: chapters 1–3 under 30 s, 4 and 5 under
45 s, chapter 6 (which trains two Transformers) under 90 s.
The test suite builds the book with the same function.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from jupyter_cache import get_cache

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))

from build_books import BuildFailed, build  # noqa: E402, F401 - BuildFailed: the tests catch it from here

# what the book reads: pages, exercise notebooks, MathJax and CSS, the local extension, papers,
# and the solution notebooks (the syllabus counts their lines to time the assignments)
SOURCES = ["book", "exercises", "_toc.yml", "_config.yml", "_assets", "_ext", "references.bib", "solutions", "zh"]
GOAL_SECONDS = {"book/01": 30.0, "book/02": 30.0, "book/03": 30.0, "book/04": 45.0, "book/05": 45.0, "book/06": 90.0,
                "book/07": 60.0}


def goal(chapter: str) -> float:
    """The execution goal of a chapter file, e.g. ``book/04_multihead.md`` -> 45 s."""
    return GOAL_SECONDS.get(chapter[:7], 30.0)


def build_from_scratch(folder: Path) -> tuple[float, dict[str, float]]:
    """Build a fresh copy of the book and its Chinese edition in ``folder`` (warnings are errors), as
    `make book` does (``_ext/build_books.py``).

    Returns:
        ``(wall_seconds, {chapter file: execution seconds})``, from the execution cache: every
        chapter the English build executed, and any page the Chinese build had to execute
        itself; the HTML is in ``folder / "_build" / "html"`` (the Chinese in its ``zh/``).
    """
    for source in SOURCES:
        copy = shutil.copytree if (ROOT / source).is_dir() else shutil.copy
        copy(ROOT / source, folder / source)
    start = time.perf_counter()
    build(folder)
    wall = time.perf_counter() - start
    cache = get_cache(folder / "_build" / ".jupyter_cache")
    seconds = {str(Path(r.uri).relative_to(folder)): r.data["execution_seconds"] for r in cache.list_cache_records()}
    return wall, seconds


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print("building the book from scratch ...", flush=True)
        wall, seconds = build_from_scratch(Path(tmp))
    print(f"\n{'chapter':<40} {'execution (s)':>14} {'goal (s)':>9}")
    for chapter, secs in sorted(seconds.items()):
        flag = "" if secs < goal(chapter) else "   over the goal"
        print(f"{chapter:<40} {secs:>14.1f} {goal(chapter):>9.0f}{flag}")
    print(f"{'total execution':<40} {sum(seconds.values()):>14.1f}")
    print(f"{'whole build (wall clock)':<40} {wall:>14.1f}")


if __name__ == "__main__":
    main()
