"""Install a requirements file into the running Python's environment, with PyTorch's CPU build.

    python tools/pip_install.py requirements.txt            # what `make install` / `make teacher` run
    python tools/pip_install.py --torch cpu requirements.txt
    python tools/pip_install.py --dry-run requirements.txt  # print the decision and pip's command only

On Linux, PyPI's wheel of the pinned torch bundles the CUDA libraries (several GB); PyTorch's
CPU wheel index (CPU_INDEX) has the same release without them, as `torch==X+cpu`. So where
that index answers within PROBE_SECONDS, pip gets it as an extra index and the pin `+cpu`;
where it does not (offline, or a machine whose pip serves torch from its own mirror), pip
gets the requirements file alone, exactly as before. On macOS and Windows PyPI's wheel is the
CPU build already, and the index is never asked.

--torch chooses instead of deciding:
    auto  the above (the default); a torch of the pinned release already installed is kept,
          whichever build it is
    cpu   the CPU index without asking whether it answers (pip fails if it does not)
    pypi  the plain pin from the requirements file: on Linux, PyPI's CUDA build (for a GPU)

Only the standard library: it runs before anything is installed.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import platform
import re
import shlex
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Long enough for one HTTPS round trip on a slow line, short enough not to slow an offline install.
PROBE_SECONDS = 2.5
# The machines for which the CPU index has wheels and PyPI's wheel bundles CUDA.
CUDA_ON_PYPI = {("Linux", "x86_64"), ("Linux", "aarch64")}


def index_answers(url: str = CPU_INDEX, seconds: float = PROBE_SECONDS) -> bool:
    """True when `url` answers an HTTP request within `seconds`, name lookup included.

    The request runs in a thread that is given up on after `seconds`: urllib's own timeout
    does not cover the name lookup, which can hang much longer on a network that drops packets.
    """
    answered = threading.Event()

    def ask():
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=seconds):
                answered.set()
        except Exception:  # any failure (no route, no name, refused, an HTTP error) means "not here"
            pass

    threading.Thread(target=ask, daemon=True).start()
    return answered.wait(seconds)


def torch_pin(requirements: Path) -> str:
    """The torch version pinned in `requirements` (`torch==2.13.0` -> "2.13.0")."""
    for line in requirements.read_text().splitlines():
        match = re.fullmatch(r"\s*torch\s*==\s*([^\s#;+]+)\s*(#.*)?", line)
        if match:
            return match.group(1)
    raise SystemExit(f"error: {requirements} has no exact pin torch==X")


def installed_torch() -> str | None:
    """The version of the torch installed in this environment (e.g. "2.13.0+cpu"), or None."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def use_cpu_index(choice: str, system: str, machine: str, pin: str, installed: str | None,
                  answers) -> tuple[bool, str]:
    """Whether pip gets the CPU index, and why. `answers()` is asked only when it matters."""
    if choice == "cpu":
        return True, "--torch cpu: PyTorch's CPU index"
    if choice == "pypi":
        return False, "--torch pypi: the plain pin (on Linux, PyPI's build with CUDA)"
    if installed is not None and installed.split("+")[0] == pin:
        # the plain pin accepts it: a GPU owner's CUDA build stays, and so does a CPU build
        return False, f"torch {installed} is installed already and is kept"
    if (system, machine) not in CUDA_ON_PYPI:
        return False, f"{system} {machine}: PyPI's torch wheel is the CPU build already"
    if answers():
        return True, f"{system} {machine}: PyPI's torch wheel bundles CUDA; {CPU_INDEX} answers"
    return False, (f"{system} {machine}: {CPU_INDEX} does not answer within {PROBE_SECONDS} s; "
                   "the plain pin (what this machine's pip configuration serves)")


def pip_command(python: str, requirements: Path, cpu_index: bool) -> list[str]:
    # --no-compile: Python compiles a module when it is first imported; compiling every module
    # of torch and JupyterLab at install time instead doubles the install's CPU time (measured
    # on the course's .venv: 69 s of CPU with it, about 135 s without).
    command = [python, "-m", "pip", "install", "--no-compile", "-r", str(requirements)]
    if cpu_index:
        # Same release, the +cpu local version from the extra index (as binder/requirements.txt).
        command += ["--extra-index-url", CPU_INDEX, f"torch=={torch_pin(requirements)}+cpu"]
    return command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("requirements", type=Path)
    parser.add_argument("--torch", choices=("auto", "cpu", "pypi"), default="auto")
    parser.add_argument("--dry-run", action="store_true", help="print the decision and the command only")
    args = parser.parse_args(argv)
    cpu_index, why = use_cpu_index(args.torch, platform.system(), platform.machine(),
                                   torch_pin(args.requirements), installed_torch(), index_answers)
    command = pip_command(sys.executable, args.requirements, cpu_index)
    print(f"torch: {why}\n{shlex.join(command)}", flush=True)
    if args.dry_run:
        return 0
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
