"""nbgrader configuration of the course (run nbgrader from this folder).

`solutions/` holds the instructor's source notebooks and `exercises/` the generated
student notebooks: `nbgrader generate_assignment 01_nadaraya_watson --force`.
"""

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "attention-course"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
# Test cells can take a moment (they run every check on CPU and, if present, CUDA).
c.ExecutePreprocessor.timeout = 120

# The feedback pages (`nbgrader generate_feedback`): nbgrader's, their list of scores naming each graded
# part, their math typeset by the course's MathJax inside the page, not a CDN's
# (autograder/instructor/templates/course_feedback/, autograder/instructor/feedback.py).
import os.path as _path  # noqa: E402

import nbgrader as _nbgrader  # noqa: E402

import autograder.instructor as _instructor  # noqa: E402

c.GenerateFeedback.exporter_class = "autograder.instructor.feedback.FeedbackExporter"  # not the formgrader's pages
c.FeedbackExporter.template_name = "course_feedback"
c.FeedbackExporter.template_file = "course_feedback.html.j2"
c.FeedbackExporter.extra_template_basedirs = [
    _path.join(_path.dirname(_instructor.__file__), "templates"),
    _path.join(_path.dirname(_nbgrader.__file__), "server_extensions", "formgrader", "templates"),
]

# Hand-ins downloaded from a learning-management system: `nbgrader zip_collect ASSIGNMENT` unpacks the LMS's
# zip in downloaded/ASSIGNMENT/archive/ and sorts its files into submitted/. The course's plugins
# (autograder/instructor/collect.py) read whose a file is from the name the LMS gave it alone, the expression
# matched against the whole of that name: a zip a student handed in is never unpacked, but kept, unopened,
# as that student's; nothing a student hands in stops the collection. The expression reads Canvas's file names,
# `<name>_<user id>_<submission id>_<file>`, with LATE_ after the name of a late hand-in and -1, -2 after the
# file's name when handed in again: lovelaceada_LATE_48213_917236_03_masking-1.ipynb is lovelaceada's
# 03_masking.ipynb; a name without a notebook's (mallory_50000_917300_handin.zip) is mallory's, kept as it is.
# The instructors' guide gives Moodle's.
c.ZipCollectApp.extractor_plugin = "autograder.instructor.collect.DownloadExtractor"
c.ZipCollectApp.collector_plugin = "autograder.instructor.collect.HandInCollector"
c.FileNameCollectorPlugin.named_regexp = r"(?P<student_id>[^/_]+)_(?:LATE_)?\d+_\d+_(?P<file_id>\d\d_[a-z_]+)?[^/]*"
