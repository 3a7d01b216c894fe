"""The book's table of contents, read the way the tests need it."""

from pathlib import Path

import yaml

from course import ROOT


def repository() -> tuple[str, str]:
    """``(url, branch)`` of the course repository in ``_config.yml``: what the exercise
    pages' launch buttons open and what their set-up cell installs on Colab."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    return config["url"], config["branch"]


def _toc() -> dict:
    return yaml.safe_load((ROOT / "_toc.yml").read_text())


def toc_parts() -> dict[str, list[str]]:
    """``{part caption: [page path without suffix, ...]}`` in the order of ``_toc.yml``."""
    return {part["caption"]: [entry["file"] for entry in part["chapters"]] for part in _toc()["parts"]}


def chapters() -> list[str]:
    """Chapter ids of the Chapters part, e.g. ``01_nadaraya_watson``."""
    return [Path(page).name for page in toc_parts()["Chapters"]]


def pages() -> list[str]:
    """Every page of the book, the landing page first, as docnames (``book/intro``)."""
    return [_toc()["root"]] + [page for part in toc_parts().values() for page in part]
