"""The instructors' grading command: parallel, sandboxed, and honest about what it graded.

``python -m autograder grade ASSIGNMENT`` grades every submission of an nbgrader course:

* ``notebooks.py`` builds the notebook to grade from the instructor's source and the
  student's answers, and ``scan.py`` refuses code that tampers with grading;
* ``sandbox.py`` and ``run.py`` execute it in a bubblewrap sandbox with limits;
* ``guard.py`` runs inside the student's kernel and audits it after each test cell;
* ``grade.py`` turns cell outcomes into one result per part;
* ``gradebook.py`` and ``cli.py`` record the results where nbgrader expects them.
"""
