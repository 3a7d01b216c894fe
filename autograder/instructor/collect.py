"""``nbgrader zip_collect`` for an LMS's download of hand-ins: the two plugins ``nbgrader_config.py`` sets.

nbgrader's own plugins unpack every zip in ``downloaded/<assignment>/archive/``, zips
inside zips too, and match the course's expression anywhere in a file's path. A zip a
student handed in was therefore unpacked and its files read as if the LMS had named them:
one holding ``victim_1_1_03_masking.ipynb`` was collected as the notebook of the student
``victim``, or stopped the whole class's collection ("Duplicate submission file").

Here only the LMS's own names say whose a file is:

* :class:`DownloadExtractor` unpacks each LMS download, a zip directly in ``archive/``
  whose own name is no hand-in's (Canvas's ``submissions.zip``), one level deep, into
  ``extracted/<its name>/``. Every other file is copied as it is: a zip a student handed
  in is never opened, wherever it lies.
* :class:`HandInCollector` matches the expression against the whole of a file's name
  below its download, the name the LMS gave it (Canvas's
  ``lovelaceada_48213_917236_03_masking.ipynb``, Moodle's
  ``Ada Lovelace_4821_assignsubmission_file_/03_masking.ipynb``), never against a part of
  a deeper path. A file the expression gives a student but not as a notebook (their zip, a
  notebook named otherwise, each of two files that both claim to be their notebook) is
  kept, unread, in that student's folder under the LMS's name for it: the student is on
  record as having handed something in, the grade run finds no notebook and says so, and
  the instructor finds the file there. Nothing a student hands in makes ``zip_collect``
  stop: every case that would is a file kept or skipped, with a warning.
"""

from __future__ import annotations

import os
import re
import shutil
import zipfile
from collections import defaultdict
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path, PurePosixPath

from nbgrader.plugins import ExtractorPlugin, FileNameCollectorPlugin

#: The suffix of an LMS's download (Canvas's and Moodle's are zips).
DOWNLOAD_SUFFIX = ".zip"
#: What a student id may not hold, as it names a folder of ``submitted/``: a leading dot, a separator, a control.
UNSAFE_ID = re.compile(r"^\.|[/\\\x00-\x1f\x7f]")


class Skip(Enum):
    """Why a file of the downloads is not collected."""

    NOT_A_HAND_IN = "its name below the download is not one the expression reads as a student's hand-in"
    UNSAFE_ID = "the student id read from its name cannot name a folder"
    SAME_NAME = "another file of the same student is kept under the same name"


@dataclass
class Collection:
    """What :func:`sort_hand_ins` makes of the files of the downloads, each named as below its download.

    Attributes:
        files: ``{name: {"student_id": ..., "file_id": ...}}``, what nbgrader is told of
            each file collected (``file_id``: the notebook's name, or the kept file's).
        kept: ``{name: student}``, the files collected unread, under their own name.
        ambiguous: ``{(student, notebook): names}``, the notebooks claimed by two files or
            more; each of those is kept.
        skipped: ``{name: why}``, the files not collected.
    """

    files: dict[str, dict[str, str]] = field(default_factory=dict)
    kept: dict[str, str] = field(default_factory=dict)
    ambiguous: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    skipped: dict[str, Skip] = field(default_factory=dict)


def hand_in(expression: str, name: str) -> re.Match | None:
    """The expression's match of the whole of ``name`` (a path below its download), if it gives a student."""
    found = re.fullmatch(expression, name) if expression else None
    return found if found is not None and found.groupdict().get("student_id") else None


def is_download(expression: str, name: str) -> bool:
    """Whether ``name``, a path below ``archive/``, is an LMS's download: a zip there, not named as a hand-in."""
    return "/" not in name and name.lower().endswith(DOWNLOAD_SUFFIX) and hand_in(expression, name) is None


def safe_member(name: str) -> bool:
    """Whether a zip's member ``name`` stays inside the folder it is unpacked into."""
    path = PurePosixPath(name)
    return (bool(path.parts) and not path.is_absolute() and ".." not in path.parts and "\\" not in name
            and not re.match(r"[A-Za-z]:", name))


def download_names(archive: Path, expression: str) -> list[str]:
    """The name below its download of every file in ``archive``: each download's members, every other file's path.

    Raises:
        zipfile.BadZipFile, OSError: a download that cannot be read.
    """
    names = []
    for path in sorted(archive.rglob("*")) if archive.is_dir() else []:
        relative = path.relative_to(archive).as_posix()
        if path.is_symlink() or not path.is_file():
            continue
        if is_download(expression, relative):
            with zipfile.ZipFile(path) as download:
                names += [m.filename for m in download.infolist() if not m.is_dir() and safe_member(m.filename)]
        else:
            names.append(relative)
    return names


def sort_hand_ins(expression: str, names: list[str], notebook_suffixes: list[str]) -> Collection:
    """Whose each file is, and under which name it goes into their folder of ``submitted/``.

    A file is a student's notebook when the expression gives it a ``file_id`` and its
    suffix is one of ``notebook_suffixes``, and no other file claims the same notebook of
    the same student; any other file the expression gives a student is kept under its
    name below the download (``/`` read as ``_``). No two files of a student get the same
    name, so nbgrader never stops on a duplicate.
    """
    collection = Collection()
    claims: dict[tuple[str, str], list[str]] = defaultdict(list)
    others: list[tuple[str, str]] = []
    for name in sorted(names):
        found = hand_in(expression, name)
        if found is None:
            collection.skipped[name] = Skip.NOT_A_HAND_IN
            continue
        student, file_id = found["student_id"], found.groupdict().get("file_id")
        if UNSAFE_ID.search(student):
            collection.skipped[name] = Skip.UNSAFE_ID
        elif file_id and PurePosixPath(name).suffix in notebook_suffixes:
            claims[(student, os.path.splitext(file_id)[0] + PurePosixPath(name).suffix)].append(name)
        else:
            others.append((name, student))
    taken: dict[str, set[str]] = defaultdict(set)
    for (student, notebook), claimants in claims.items():
        if len(claimants) == 1:
            collection.files[claimants[0]] = {"student_id": student, "file_id": notebook}
            taken[student].add(notebook)
        else:
            collection.ambiguous[(student, notebook)] = claimants
            others += [(name, student) for name in claimants]
    for name, student in sorted(others):
        kept = name.replace("/", "_")
        if kept in taken[student]:
            collection.skipped[name] = Skip.SAME_NAME
            continue
        taken[student].add(kept)
        collection.files[name] = {"student_id": student, "file_id": kept}
        collection.kept[name] = student
    return collection


def below_download(relative: str, downloads: set[str]) -> str:
    """A file's name below its download, from its path below ``extracted/`` (a download's files lie in a folder
    named after it)."""
    first, _, rest = relative.partition("/")
    return rest if rest and first in downloads else relative


def collect_path(app, step: str) -> Path:
    """The folder of ``step`` (``archive``, ``extracted``) of ``app``'s (a ZipCollectApp's) assignment."""
    return Path(app.coursedir.root) / app.collect_directory_structure.format(
        downloaded=app.downloaded_directory, assignment_id=app.coursedir.assignment_id, collect_step=step)


class DownloadExtractor(ExtractorPlugin):
    """Unpack each LMS download in ``archive/`` (see :func:`is_download`) one level deep; copy everything else,
    unopened. ``zip_ext`` is not read: nothing but a download is ever unpacked."""

    def extract(self, archive_path: str, extracted_path: str) -> None:
        """Unpack or copy every file of ``archive_path`` into ``extracted_path`` (called by ``zip_collect``)."""
        collector = getattr(self.parent, "collector_plugin_inst", None)
        expression = getattr(collector, "named_regexp", "")
        archive, extracted = Path(archive_path), Path(extracted_path)
        for path in sorted(archive.rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            relative = path.relative_to(archive).as_posix()
            if is_download(expression, relative):
                self._unpack(path, extracted / path.name[: -len(DOWNLOAD_SUFFIX)])
            else:
                target = extracted / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                self.log.info("Copying %s, unopened", path)
                shutil.copyfile(path, target)

    def _unpack(self, path: Path, folder: Path) -> None:
        """Write the members of the download ``path`` into ``folder``; zips among them stay zips."""
        self.log.info("Unpacking the download %s into %s", path, folder)
        try:
            with zipfile.ZipFile(path) as download:
                for member in download.infolist():
                    if member.is_dir():
                        continue
                    if not safe_member(member.filename):
                        self.log.warning("Skipped %r of %s: its name leads out of the folder", member.filename, path)
                        continue
                    target = folder.joinpath(*PurePosixPath(member.filename).parts)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with download.open(member) as source, target.open("wb") as sink:
                        shutil.copyfileobj(source, sink)
        except (zipfile.BadZipFile, OSError) as error:
            self.log.error("Cannot unpack the download %s (%s): nothing of it is collected", path, error)


class HandInCollector(FileNameCollectorPlugin):
    """Read whose each file is from its name below its download alone (:func:`sort_hand_ins`), the expression
    matched against the whole of that name."""

    _collection: Collection | None = None
    _names: dict[str, str] | None = None

    def collect(self, submitted_file: str) -> dict[str, str] | None:
        """What nbgrader is told of ``submitted_file``, a file of ``extracted/``; ``None``: not collected."""
        if self._collection is None:
            self._sort()
        name = self._names.get(os.path.realpath(submitted_file))
        return None if name is None else self._collection.files.get(name)

    def _sort(self) -> None:
        """Sort every file of ``extracted/`` at once (a notebook is ambiguous only among them all), and say what is
        not collected as a notebook, and why."""
        archive = collect_path(self.parent, self.parent.archive_directory)
        extracted = Path(os.path.realpath(collect_path(self.parent, self.parent.extracted_directory)))
        downloads = {p.name[: -len(DOWNLOAD_SUFFIX)] for p in archive.glob("*")
                     if p.is_file() and is_download(self.named_regexp, p.name)}
        self._names = {str(path): below_download(path.relative_to(extracted).as_posix(), downloads)
                       for path in (Path(os.path.realpath(found)) for found in extracted.rglob("*"))
                       if path.is_file() and path.is_relative_to(extracted)}
        self._collection = sort_hand_ins(self.named_regexp, list(self._names.values()), list(self.valid_ext))
        self._say(self._collection)

    def _say(self, collection: Collection) -> None:
        for (student, notebook), names in sorted(collection.ambiguous.items()):
            self.log.warning("%d files claim to be %s's %s (%s): none is read as it; each is kept under its own "
                             "name in %s's folder: copy the right one to %s by hand", len(names), student, notebook,
                             ", ".join(names), student, notebook)
        claimed = {name for names in collection.ambiguous.values() for name in names}
        for name, student in sorted(collection.kept.items()):
            if name not in claimed:
                self.log.warning("%s is %s's but not their notebook: kept, unopened, in their folder as %s; "
                                 "the grade run finds no notebook there", name, student,
                                 collection.files[name]["file_id"])
        for name, why in sorted(collection.skipped.items(), key=lambda item: item[0]):
            self.log.warning("Not collected: %s (%s)", name, why.value)
