"""What runs in the student's kernel: trusted by nobody, deciding nothing.

In a student's notebook the kernel is the notebook's own; at grading it is the student's
kernel in its sandbox, beside the student's code, which can change anything here. So
nothing here decides a grade: it calls answers and measures them, and what it finds goes
to the judge as data, read as the student's word.

* ``respond.py``: the only code that calls a student's answer (:func:`respond.respond`);
* ``measure.py``: what only the answer's process can measure (largest tensor, peak memory,
  library attention called, backward passes, a module's layers);
* ``serve.py``: at grading, the answers pinned at each test cell, and requests and replies
  as bytes through the kernel's ``input()``;
* ``zygote.py`` and ``linux.py``: at grading, the process that sets up each kernel's
  sandbox (namespaces, mounts, limits) and forks it warm, before any student code runs;
  ``sealed_reference/`` is what the sandbox mounts over the references.
"""
