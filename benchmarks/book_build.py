"""Build the book from scratch and print the execution seconds of each chapter.

    .venv/bin/python benchmarks/book_build.py      (or: make benchmark)

The book is copied to a temporary folder and built there with a fresh execution cache,
so nothing is reused from an earlier build; the cache then holds each notebook's
execution time. Goal: every chapter executes in under 30 s on 2 CPU cores.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from jupyter_cache import get_cache

ROOT = Path(__file__).resolve().parents[1]
GOAL_SECONDS = 30.0


def copy_book(destination: Path) -> None:
    """The book's sources, with execution switched to a cache that records timings."""
    shutil.copytree(ROOT / "book", destination / "book")
    shutil.copy(ROOT / "_toc.yml", destination)
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["execute"]["execute_notebooks"] = "cache"
    (destination / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))


def build(folder: Path) -> float:
    """Build the book in ``folder``; return the wall-clock seconds."""
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    start = time.perf_counter()
    subprocess.run([str(jupyter_book), "build", str(folder), "--warningiserror", "--keep-going"], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def chapter_seconds(folder: Path) -> dict[str, float]:
    """``{chapter file: execution seconds}`` from the build's execution cache."""
    cache = get_cache(folder / "_build" / ".jupyter_cache")
    return {
        str(Path(record.uri).relative_to(folder)): record.data["execution_seconds"]
        for record in cache.list_cache_records()
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        copy_book(folder)
        print("building the book from scratch ...", flush=True)
        wall = build(folder)
        seconds = chapter_seconds(folder)
    print(f"\n{'chapter':<40} {'execution (s)':>14}")
    for chapter, secs in sorted(seconds.items()):
        flag = "" if secs < GOAL_SECONDS else f"   over the {GOAL_SECONDS:.0f} s goal"
        print(f"{chapter:<40} {secs:>14.1f}{flag}")
    print(f"{'total execution':<40} {sum(seconds.values()):>14.1f}")
    print(f"{'whole build (wall clock)':<40} {wall:>14.1f}")


if __name__ == "__main__":
    main()
