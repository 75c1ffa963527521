# nbgrader's configuration for every account of the hub (students, and the grader's server):
# the course, and the exchange where the teacher releases and the students submit.
# hub/jupyterhub_config.py puts this folder on JUPYTER_CONFIG_PATH and sets COURSE_EXCHANGE.
import os

c = get_config()  # noqa: F821 (nbgrader provides it)
c.CourseDirectory.course_id = "transformer-shape-first"
c.Exchange.root = os.environ.get("COURSE_EXCHANGE", "/srv/nbgrader/exchange")
# `nbgrader validate` runs the notebook as the grader does: with the grader's cell timeout (the
# default 30 s is shorter than torch's first import on a busy machine), so that it lists the failing
# exercises instead of stopping with a timeout.
c.Execute.timeout = 120
