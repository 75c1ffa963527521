# The hub test's students are not Unix users (they all run as the test's own user), so their
# submissions are named after their hub user instead; the rest is the shipped configuration.
import os
from pathlib import Path

c = get_config()  # noqa: F821 (nbgrader provides it)
load_subconfig(str(Path(__file__).resolve().parents[2] / "student-config" / "nbgrader_config.py"))  # noqa: F821
if "JUPYTERHUB_USER" in os.environ:
    c.CourseDirectory.student_id = os.environ["JUPYTERHUB_USER"]
