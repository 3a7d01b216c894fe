"""``python -m autograder grade ASSIGNMENT`` and ``publish DEST``: the instructors' commands (``grading/cli.py``)."""

try:
    from .grading.cli import main
except ImportError as missing:  # the students' copy of the package has no grading side
    raise SystemExit(f"the grading commands need the instructors' course repository and its environment ({missing})")

raise SystemExit(main())
