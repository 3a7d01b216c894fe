"""Checks for the attention-mechanisms course's nbgrader exercises.

One module per assignment, named after the assignment with a ``ch`` prefix (Python
names cannot start with a digit): ``01_nadaraya_watson`` -> ``autograder.ch01_nadaraya_watson``.
Each module declares the assignment's graded parts and holds the ``check_<part>``
functions that the notebooks' test cells call; their visible cases are data in
``autograder/cases/``.

Where each part runs, and so what it may trust:

* this folder (the checks, ``parts``, ``judge``, ``protocol``, ``wire``, ``core``, ``text``,
  ``plots``): the student's notebook, and the grading worker's judge; shared by both;
* ``kernel/``: the student's kernel (the notebook's own, or the sandboxed one at grading):
  it calls the answers and measures them, and decides nothing;
* ``grading/``: a grading worker, one submission at a time, judging from outside the kernel;
* ``instructor/``: the instructor's commands (``python -m autograder grade``, ``publish``);
* ``reference/``: reference answers and hidden cases, on the grading side only.

``grading/``, ``instructor/`` and ``reference/`` (the grading side)
belong to the instructors' copy of the course only.
"""

__version__ = "0.1.0"

import sys
import warnings


def _show_warning_on_stdout(message, category, filename, lineno, file=None, line=None):
    """Print warnings on stdout: nbgrader gives 0 points to a graded cell that writes to stderr.

    A correct answer that happens to trigger a PyTorch warning must keep its points, and
    students should still see the warning, so importing ``autograder`` reroutes it.
    """
    sys.stdout.write(warnings.formatwarning(message, category, filename, lineno, line))


warnings.showwarning = _show_warning_on_stdout
