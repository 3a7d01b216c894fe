"""The instructors' grading command: parallel, sandboxed, and judged from outside the student's kernel.

``python -m autograder grade ASSIGNMENT`` grades every submission of an nbgrader course:

* ``notebooks.py`` builds the notebook to grade from the instructor's source and the
  student's answers, reads what each test cell checks, and keeps only safe outputs;
* ``sandbox.py`` and ``zygote.py`` start the student's kernel in a sandbox with limits;
  ``execute.py`` runs the submission's cells there, within deadlines, and pins the answers;
* ``verdict.py`` judges every part in this process with the course's judge
  (``autograder/judge.py``), which asks the kernel for the answers' results through
  ``kernel_respondent.py`` and decides from them as data;
* ``gradebook.py``, ``assignment.py`` and ``cli.py`` record the results where nbgrader
  expects them; ``in_process.py`` is the same path without a kernel, for the course's tests.
"""
