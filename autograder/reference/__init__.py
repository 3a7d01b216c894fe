"""The grading side of the checks: reference answers and hidden cases. Instructors only.

One module per chapter, named like the chapter's checks module
(``autograder.reference.ch01_nadaraya_watson``), with

* the course's reference implementations of the chapter's graded parts (the book's
  chapters demonstrate with them);
* ``REFERENCES``: ``{part: reference answer}``;
* ``VISIBLE``: ``{part: () -> [Call]}``, the visible cases, stored with the reference's
  results in ``autograder/cases/<chapter>.json`` by ``python -m autograder.reference.generate``;
* ``HIDDEN``: ``{part: (seed) -> [Call]}``, the hidden cases drawn at grading time. Edge
  cases that decide correctness are always among them, never left to the draw.

This subpackage is left out of what students install (``pyproject.toml`` excludes it from
the wheel, and ``python -m autograder publish`` from the student repository), so the
answers and the hidden cases stay with the instructor.
"""
