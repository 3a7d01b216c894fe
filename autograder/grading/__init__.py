"""A grading worker: one submission graded, its kernel sandboxed, every part judged from outside it.

Runs in a process forked per submission by the instructor's command (``forks.py``) or in a
Dask worker. It holds the references and the student's key of hidden cases; it trusts
nothing the student's kernel sends (replies, outputs, the notebook itself are data, cut
and cleaned), and it writes nothing to the course.

* ``worker.py``: the task a worker runs for one submission;
* ``notebooks.py`` builds the notebook to grade from the instructor's source and the
  student's answers; ``reading.py`` reads the submission's own cells, as the grader's own
  source of what an answer calls (library attention) and of code beyond a static reading;
* ``sandbox.py`` (the sandbox, as data), ``kernels.py`` (a kernel started from the zygote,
  held and ended) and ``limits.py`` (a cgroup per kernel) keep the student's kernel in its
  bounds; ``execute.py`` runs the submission's cells there, within deadlines;
* ``verdict.py`` judges every part with the course's judge (``autograder/judge.py``), which
  asks the kernel for the answers' results through ``kernel_respondent.py``;
* ``errors.py``: what can go wrong asking a kernel; ``forks.py``: this machine's workers;
* ``in_process.py``: the same path without a kernel, for the course's own tests.
"""
