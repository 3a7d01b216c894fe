"""What can go wrong while a grading worker asks a kernel, as exceptions of the grader's own.

None of these is a wrong answer: each says why the grader could not get one (the judge's
faults are ``judge.JudgeFault``). Kept apart from the modules that raise them, so that the
session (``execute.py``) and the respondent that asks through it (``kernel_respondent.py``)
need not import each other.
"""


class Deadline(Exception):
    """The kernel did not answer before the deadline (it was killed)."""


class GradingEnvironmentError(RuntimeError):
    """The grading kernel cannot even start its work (the same for every submission): the message says why and
    what to do."""


class KernelLost(Exception):
    """The kernel died, or stopped answering, while it was asked something."""


class TimedOut(Exception):
    """A request got no reply before its deadline (the kernel was killed)."""
