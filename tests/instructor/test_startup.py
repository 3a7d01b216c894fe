"""The grading command's start: its zygote spawned before the grading code is imported, and each phase timed.

``python -m autograder grade`` spawns the kernels' zygote first (``startup.py``), so that it
imports PyTorch while the command imports the grading code; ``grade()`` then waits for what
is left of its start, or stops it unused when the run needs another one, or none.
"""

from __future__ import annotations

import os
import sys

import pytest

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces"),
              pytest.mark.sandbox]


@pytest.fixture
def spawned(monkeypatch):
    """``kernels``' zygotes as this test leaves them: none spawned before, none after."""
    from autograder.grading import kernels

    monkeypatch.setattr(kernels, "_spawned", {})
    yield kernels._spawned
    kernels.spawn(None)


def test_grade_spawns_the_zygote_grade_will_ask_for(spawned, monkeypatch, tmp_path):
    from autograder.grading import kernels
    from autograder.instructor import grade, settings, startup

    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    startup.start_zygote(["grade", "03_masking", "--course-dir", str(tmp_path), "--workers", "1", "--device", "cpu"])
    asked, _ = settings.resolve(settings.course_config(tmp_path), workers=1, device="cpu")
    assert list(spawned) == [kernels.key(startup.requested_limits(asked, local=True))]
    assert startup.requested_limits(asked, local=True) == grade._limits(asked, local=True)  # device cpu: as asked
    zygote = spawned[kernels.key(startup.requested_limits(asked, local=True))]
    kernels.spawn(None)  # the run needs none (nothing to grade, or a Dask scheduler): stopped at once
    assert spawned == {} and zygote.process.poll() is not None and not os.path.exists(zygote.folder)


@pytest.mark.parametrize("argv", [["publish", "out"], ["grade", "03_masking", "--scheduler", "tcp://host:8786"],
                                  ["grade", "03_masking", "--memory-mb", "1"]],
                         ids=["another command", "a Dask scheduler", "a setting grade refuses"])
def test_nothing_is_spawned_where_grade_would_start_no_zygote(spawned, argv):
    from autograder.instructor import startup

    startup.start_zygote(argv)
    assert spawned == {}


def test_a_zygote_spawned_for_other_limits_is_stopped_for_the_right_one(spawned):
    from autograder.grading import kernels
    from autograder.grading.sandbox import Limits

    kernels.spawn(Limits(device="cpu", memory_mb=2048))
    guessed = next(iter(spawned.values()))
    kernels.spawn(Limits(device="cpu", memory_mb=3072))
    assert list(spawned) == [kernels.key(Limits(device="cpu", memory_mb=3072))]
    assert guessed.process.poll() is not None


def test_the_run_times_each_phase_and_says_so():
    from autograder.instructor.grade import Phases, timing

    clock = Phases()
    for name in ("course", "grading", "recording", "grading"):
        clock.end(name)
    assert list(clock.seconds) == ["course", "grading", "recording"]  # a phase met again adds up
    assert all(seconds >= 0 for seconds in clock.seconds.values())
    assert timing({"imports": 3.04, "zygote (the rest of its start)": 1.25}) == \
        "imports 3.0 s, zygote (the rest of its start) 1.2 s"
