"""What a grading kernel finds in place of ``autograder.reference``: nothing to import.

The sandbox (``sandbox.py``) mounts this folder over the references, so that no reference
implementation or hidden-case generator is ever in a student's kernel; the judge computes
with them in the grading process, outside it.
"""

raise ImportError("the course's references are not in a grading kernel: every part is judged outside it")
