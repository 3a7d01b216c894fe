"""The feedback pages' math, typeset from the course's own MathJax, with no content-delivery network.

nbgrader's feedback page loads MathJax 2 from a CDN, so its math stays raw ``$…$`` on a
network without internet and depends on a third party everywhere else. The course's page
(``templates/course_feedback/``) leaves that script out and, when this preprocessor found
the course's MathJax (npm's ``mathjax`` package, which ``make book`` installs for the book),
puts MathJax 3's SVG build inside the page: one self-contained HTML file per student (about
2 MB more), whose math typesets offline, uploaded to an LMS or opened from an e-mail.
``nbgrader_config.py`` makes :class:`FeedbackExporter` the exporter of ``generate_feedback``
only, so the formgrader's own pages keep nbgrader's templates.
"""

from __future__ import annotations

import functools
from pathlib import Path

from nbconvert.exporters import HTMLExporter
from nbconvert.preprocessors import Preprocessor
from traitlets import List, Unicode

#: Where ``make book`` leaves MathJax's SVG build, relative to the course repository.
MATHJAX = Path("node_modules") / "mathjax" / "es5" / "tex-svg.js"


def _course_mathjax() -> str:
    import autograder

    return str(Path(autograder.__file__).resolve().parents[1] / MATHJAX)


class InlineMathJax(Preprocessor):
    """Put the course's MathJax into the page's resources (``resources["course_mathjax"]``), read once."""

    mathjax_file = Unicode(_course_mathjax(), help="MathJax 3's tex-svg.js, put inside each feedback page so that its "
                           "math typesets offline (empty: show the math as TeX)").tag(config=True)

    def preprocess(self, nb, resources):
        script = _read(self.mathjax_file)
        if script:
            resources["course_mathjax"] = script
        else:
            self.log.warning("no MathJax at %s (run `make book` once): the feedback pages show their math as TeX",
                             self.mathjax_file)
        return nb, resources


@functools.cache
def _read(path: str) -> str:
    """The file at ``path`` (read once per process), or ``""``."""
    try:
        return Path(path).read_text(encoding="utf-8") if path else ""
    except OSError:
        return ""


class FeedbackExporter(HTMLExporter):
    """The exporter of ``nbgrader generate_feedback``: nbgrader's HTML, with :class:`InlineMathJax` (its template
    is set in ``nbgrader_config.py``, as ``c.FeedbackExporter.template_name``)."""

    preprocessors = List([InlineMathJax], help="run on each notebook before it becomes a page").tag(config=True)
