"""``python -m autograder grade ASSIGNMENT``: the instructors' grading command (see ``grading/cli.py``)."""

from .grading.cli import main

raise SystemExit(main())
