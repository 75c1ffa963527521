# The hub test's JupyterHub: the shipped one-machine config (hub/jupyterhub_config.py), loaded
# whole, with only what a test machine cannot have replaced: students are not Unix users here
# (a spawner without system users, a test authenticator, no systemd), everything listens on
# 127.0.0.1, and the state lives in the test's folder. The roles, the services' scopes, the
# single-user command and its environment are the shipped ones. hub/tests/classroom.py starts it.
import os
from pathlib import Path

c = get_config()  # noqa: F821 (JupyterHub provides it)
load_subconfig(str(Path(__file__).resolve().parents[1] / "jupyterhub_config.py"))  # noqa: F821

RUN = Path(os.environ["HUB_TEST_DIR"])
PORT, HUB_PORT, API_PORT = (int(p) for p in os.environ["HUB_TEST_PORTS"].split(","))
MARKER = {"HUB_TEST_RUN": os.environ["HUB_TEST_RUN"]}

c.JupyterHub.spawner_class = "simple"  # SimpleLocalProcessSpawner: every server as this process's user
c.SimpleLocalProcessSpawner.home_dir_template = str(RUN / "home" / "{username}")
c.Spawner.pre_spawn_hook = None  # makes Unix users in the shipped config
# As root, jupyterhub-singleuser exits unless told it may run as root (the hub then answers 500).
c.Spawner.args = ["--allow-root"] if os.getuid() == 0 else []
# Students are not Unix users here, so nbgrader names a submission after the hub user.
c.Spawner.environment = {**c.Spawner.environment, **MARKER,
                         "JUPYTER_CONFIG_PATH": str(Path(__file__).resolve().parent / "student-config")}
c.JupyterHub.authenticator_class = "dummy"

c.JupyterHub.bind_url = f"http://127.0.0.1:{PORT}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = HUB_PORT
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{API_PORT}"
c.JupyterHub.db_url = f"sqlite:///{RUN / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(RUN / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(RUN / "jupyterhub.pid")
c.ConfigurableHTTPProxy.pid_file = str(RUN / "proxy.pid")

# The services: the shipped culler as it is; the grader's server is the teacher's own business
# (it runs as the grader's Unix user), so here it is only registered, and the test drives
# nbgrader's commands itself. Plus the test's admin service, whose token creates the class.
for service in c.JupyterHub.services:
    service["environment"] = {**service.get("environment", {}), **MARKER}
    if service["name"] == "grader":
        for key in ("command", "user", "cwd"):
            service.pop(key)
c.JupyterHub.services.append({"name": "class-test", "api_token": os.environ["HUB_TEST_TOKEN"]})
c.JupyterHub.load_roles.append({"name": "admin", "services": ["class-test"]})
