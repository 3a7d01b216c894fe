"""``python -m autograder grade ASSIGNMENT`` and ``publish DEST``: the instructors' commands (``instructor/cli.py``)."""

import gc
import sys
import time

try:
    from .instructor.startup import start_zygote

    start_zygote(sys.argv[1:])  # for grade: the kernels' zygote imports PyTorch while this process does below
    began = time.monotonic()
    from .instructor.cli import main
except ImportError as missing:  # the students' copy of the package has no grading side
    raise SystemExit(f"the grading commands need the instructors' course repository and its environment ({missing})"
                     ) from None

code = main(import_seconds=time.monotonic() - began)
gc.freeze()  # the process ends: Python's exit then skips walking every object (seconds, with PyTorch loaded)
raise SystemExit(code)
