"""``python -m autograder grade ASSIGNMENT`` and ``publish DEST``: the instructors' commands (``instructor/cli.py``)."""

import gc

try:
    from .instructor.cli import main
except ImportError as missing:  # the students' copy of the package has no grading side
    raise SystemExit(f"the grading commands need the instructors' course repository and its environment ({missing})"
                     ) from None

code = main()
gc.freeze()  # the process ends: Python's exit then skips walking every object (seconds, with PyTorch loaded)
raise SystemExit(code)
