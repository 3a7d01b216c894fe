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
