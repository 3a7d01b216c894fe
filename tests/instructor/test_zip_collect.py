"""``nbgrader zip_collect`` with the course's plugins (``autograder/instructor/collect.py``), on an LMS's download
that students tried to use: each honest student collected under their own id, nothing collected from inside what a
student handed in, and the class's collection never stopped by one hand-in.

Each test runs the real ``nbgrader zip_collect`` in a small course: the course's ``nbgrader_config.py`` and the
released notebook of 03 (which is all ``zip_collect`` reads), and a download as the LMS writes it.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from course import ROOT, nbgrader

pytestmark = pytest.mark.nbgrader

A = "03_masking"
GUIDE = ROOT / "book" / "instructors" / "index.md"
#: An honest student's hand-in: its bytes say whose it is.
HONEST = {"lovelaceada_48213_917236_03_masking.ipynb": "lovelaceada",
          "hopperg_LATE_51002_917240_03_masking-1.ipynb": "hopperg",
          "turinga_50871_917251_03_masking.ipynb": "turinga"}


def course(directory: Path, expression: str | None = None) -> Path:
    """A course that ``zip_collect`` can run in: the course's configuration (``expression``: the regular
    expression in place of Canvas's) and the released notebook of 03."""
    config = (ROOT / "nbgrader_config.py").read_text()
    if expression is not None:
        config = re.sub(r"^c\.FileNameCollectorPlugin\.named_regexp = .*$",
                        lambda _: f"c.FileNameCollectorPlugin.named_regexp = r\"{expression}\"", config, flags=re.M)
    (directory / "exercises" / A).mkdir(parents=True)
    (directory / "nbgrader_config.py").write_text(config)
    shutil.copy(ROOT / "exercises" / A / f"{A}.ipynb", directory / "exercises" / A)
    (directory / "downloaded" / A / "archive").mkdir(parents=True)
    return directory


def hand_in(student: str) -> str:
    """A notebook that says who wrote it."""
    return json.dumps({"cells": [], "metadata": {"author": student}, "nbformat": 4, "nbformat_minor": 5})


def a_zip(files: dict[str, str | bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as written:
        for name, content in files.items():
            written.writestr(name, content)
    return buffer.getvalue()


def collected(course_dir: Path) -> dict[str, dict[str, bytes]]:
    """``{student: {file name: bytes}}`` of ``submitted/``."""
    submitted = course_dir / "submitted"
    return {folder.name: {path.name: path.read_bytes() for path in (folder / A).iterdir()}
            for folder in sorted(submitted.iterdir())} if submitted.is_dir() else {}


#: Mallory's zip: a notebook named as Canvas would name the victim's, and one as lovelaceada's.
MALLORYS_ZIP = a_zip({"victim_1_1_03_masking.ipynb": hand_in("mallory"),
                      "lovelaceada_48213_917236_03_masking.ipynb": hand_in("mallory")})


@pytest.mark.parametrize("victim_handed_in", [True, False], ids=["victim-handed-in", "victim-did-not"])
def test_a_students_zip_never_collects_anothers_work_nor_stops_the_class(tmp_path, victim_handed_in):
    """Before: with the victim's own hand-in, ``zip_collect`` stopped for the whole class ("Duplicate submission
    file", nobody collected); without it, mallory's file was collected as ``submitted/victim/``."""
    download = {name: hand_in(student) for name, student in HONEST.items()}
    download["mallory_50000_917300_handin.zip"] = MALLORYS_ZIP
    # eve hands in a file named as Canvas names turinga's: Canvas puts eve's own name before it
    download["eve_50123_917400_turinga_50871_917251_03_masking.ipynb"] = hand_in("eve")
    if victim_handed_in:
        download["victim_50999_917299_03_masking.ipynb"] = hand_in("victim")
    root = course(tmp_path)
    (root / "downloaded" / A / "archive" / "submissions.zip").write_bytes(a_zip(download))

    run = nbgrader(root, "zip_collect", A)

    found = collected(root)
    for student in [*HONEST.values(), *(["victim"] if victim_handed_in else [])]:
        assert found[student] == {f"{A}.ipynb": hand_in(student).encode()}, f"{student}'s own notebook, alone"
    assert "victim" in found if victim_handed_in else "victim" not in found
    # what mallory and eve handed in is theirs, kept as it is, unread: no notebook of theirs is graded
    assert found["mallory"] == {"mallory_50000_917300_handin.zip": MALLORYS_ZIP}
    assert found["eve"] == {"eve_50123_917400_turinga_50871_917251_03_masking.ipynb": hand_in("eve").encode()}
    assert "mallory_50000_917300_handin.zip is mallory's but not their notebook: kept, unopened" in run.stderr
    # mallory's zip was never opened: nothing of it lies anywhere in the course
    assert not list(root.rglob("victim_1_1_*")) and not list(root.rglob("*handin/*"))


def test_a_download_unpacked_by_hand_still_leaves_a_students_zip_closed(tmp_path):
    """The instructor unpacked Canvas's zip into archive/: mallory's zip lies there beside the notebooks, named as
    a hand-in, and is taken as hers, not as a download to unpack."""
    root = course(tmp_path)
    archive = root / "downloaded" / A / "archive"
    for name, student in HONEST.items():
        (archive / name).write_text(hand_in(student))
    (archive / "mallory_50000_917300_handin.zip").write_bytes(MALLORYS_ZIP)

    nbgrader(root, "zip_collect", A)

    found = collected(root)
    assert sorted(found) == ["hopperg", "lovelaceada", "mallory", "turinga"]
    assert found["lovelaceada"] == {f"{A}.ipynb": hand_in("lovelaceada").encode()}
    assert found["mallory"] == {"mallory_50000_917300_handin.zip": MALLORYS_ZIP}


def test_two_files_claiming_one_notebook_and_odd_names_stop_nothing(tmp_path):
    """Two notebooks of one student (two Canvas users of one name, or one who uploaded twice) are neither read
    (which is theirs?) nor a reason to stop: both are kept, for the instructor to choose. A member named out of
    the download's folder, or a student id that is no folder's name, is skipped."""
    download = {name: hand_in(student) for name, student in HONEST.items()}
    download["smithj_52000_917500_03_masking.ipynb"] = hand_in("smithj one")
    download["smithj_52001_917501_03_masking-1.ipynb"] = hand_in("smithj two")
    download["../turinga_50871_917251_03_masking.ipynb"] = hand_in("out of the folder")
    download["..._1_1_03_masking.ipynb"] = hand_in("a hidden folder")
    root = course(tmp_path)
    (root / "downloaded" / A / "archive" / "submissions.zip").write_bytes(a_zip(download))

    run = nbgrader(root, "zip_collect", A)

    found = collected(root)
    assert sorted(found) == ["hopperg", "lovelaceada", "smithj", "turinga"]
    assert found["turinga"] == {f"{A}.ipynb": hand_in("turinga").encode()}
    assert sorted(found["smithj"]) == ["smithj_52000_917500_03_masking.ipynb", "smithj_52001_917501_03_masking-1.ipynb"]
    assert f"2 files claim to be smithj's {A}.ipynb" in run.stderr
    assert not (root / "downloaded" / A / f"turinga_50871_917251_{A}.ipynb").exists()


def test_the_guides_moodle_expression_reads_moodles_folders_and_nothing_inside_a_students(tmp_path):
    """Moodle's download has a folder per student, into which a student may put folders of their own: one named
    as Moodle names another student's is not that student's."""
    moodle = [line for line in guide_lines("c.FileNameCollectorPlugin.named_regexp") if "assignsubmission" in line]
    assert moodle, "the guide gives no expression for Moodle"
    root = course(tmp_path, re.search(r'r"(.*)"', moodle[0]).group(1))
    download = {f"Ada Lovelace_4821_assignsubmission_file_/{A} (1).ipynb": hand_in("ada"),
                "Ada Lovelace_4821_assignsubmission_onlinetext_/onlinetext.html": "<p>hi</p>",
                f"Eve Attacker_4999_assignsubmission_file_/Grace Hopper_5002_assignsubmission_file_/{A}.ipynb":
                    hand_in("eve"),
                "Eve Attacker_4999_assignsubmission_file_/handin.zip": a_zip({f"{A}.ipynb": hand_in("eve")})}
    (root / "downloaded" / A / "archive" / "course-03_masking-123.zip").write_bytes(a_zip(download))

    nbgrader(root, "zip_collect", A)

    found = collected(root)
    assert sorted(found) == ["4821", "4999"]
    assert found["4821"] == {f"{A}.ipynb": hand_in("ada").encode()}
    assert sorted(found["4999"]) == ["Eve Attacker_4999_assignsubmission_file__handin.zip"]


def guide_lines(prefix: str) -> list[str]:
    """The lines of the guide's code blocks that start with ``prefix``."""
    blocks = re.findall(r"```[^\n]*\n(.*?)```", GUIDE.read_text(), flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip().startswith(prefix)]
