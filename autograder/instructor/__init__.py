"""The instructor's commands: ``python -m autograder grade`` and ``publish``, in the instructor's process.

This process holds the course secret and is the only one that writes: the gradebook, the
autograded notebooks, the CSV, the student repository. It trusts the course's files and
the results its grading workers return (checked against its own code fingerprint), never
a submission's bytes, which it only hands to a worker (``autograder/grading/``).

* ``cli.py``: the commands; ``startup.py``: their command line, read before the grading code
  is imported, and the kernels' zygote started from it; ``settings.py``: every setting, declared once;
* ``grade.py``: :func:`grade`, grading every new or changed submission, with workers of this
  machine or a Dask cluster, and the run's summary;
* ``gradebook.py``: the course directory as nbgrader lays it out, and the grades recorded;
* ``report.py`` (and its figures, ``report_figures.py``): the class report, one HTML page of what the class
  got right and wrong;
* ``collect.py``: the plugins of ``nbgrader zip_collect`` that read an LMS's download of hand-ins by the LMS's
  names alone, never unpacking what a student handed in;
* ``export.py``: one assignment's totals as Canvas's or Moodle's gradebook import reads them;
  ``spreadsheet.py``: every text cell of the course's CSV files inert in a spreadsheet;
* ``secret.py``: the course secret behind the hidden cases;
* ``publish.py``: the student repository of a course run for credit;
* ``feedback.py`` and ``templates/``: the feedback pages' math, from the course's own MathJax.
"""

import sys

# jsonschema, which nbformat imports, builds rfc3987_syntax's IRI grammar (lark, Earley) as it
# is imported, for its optional "iri" format checks: 2 to 5 s of every grading run's start
# (python-jsonschema/jsonschema#1428). No notebook, nbgrader or gradebook schema asks for that
# format, so this process goes without that check (jsonschema leaves it out when the module is missing).
sys.modules.setdefault("rfc3987_syntax", None)
