"""``python -m autograder grade ASSIGNMENT`` and ``publish DEST``: the instructors' commands (``instructor/cli.py``)."""

try:
    from .instructor.cli import main
except ImportError as missing:  # the students' copy of the package has no grading side
    raise SystemExit(f"the grading commands need the instructors' course repository and its environment ({missing})")

raise SystemExit(main())
