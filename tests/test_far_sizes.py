"""How far each check tiles each axis is counted by tools/far_sizes.py and stored in
tfmlib/data/far_sizes.json, so that a learner's first check does not pay for counting (the
count's dispatch modes import torch._dynamo: seconds). Counted again here: a change to an
exercise's reference, cases or contract that moves its cost fails until the table is stored
again (`make far-sizes`)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from tfmlib.exercises import REGISTRY, core

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("far_sizes", ROOT / "tools" / "far_sizes.py")
far_sizes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(far_sizes)


def test_the_stored_table_is_the_counted_one():
    stored = json.loads(core.FAR_SIZES_FILE.read_text())
    assert stored == far_sizes.table(), "tfmlib/data/far_sizes.json is stale: run `make far-sizes`"


def test_the_check_tiles_each_axis_the_table_names():
    for name, axes in json.loads(core.FAR_SIZES_FILE.read_text()).items():
        exercise = REGISTRY[name]
        case = exercise.make_cases()[exercise.contract.base]
        names = core._argument_names(exercise, case)
        labels = {c.label for c in exercise.cases()}
        for axis, size in axes.items():
            assert core._resized(case, names, axis, exercise.contract.axes[axis], size).label in labels, (name, axis)


def test_a_first_check_imports_no_dynamo():
    # in a fresh process, as a learner's kernel: the heaviest checks, on right answers
    script = ("import sys\nfrom tfmlib.exercises import check, REGISTRY\n"
              "for name in ('scaled_dot_product_attention', 'multi_head_attention', 'encoder'):\n"
              "    assert check(name, REGISTRY[name].reference).status == 'passed', name\n"
              "print('torch._dynamo' in sys.modules)")
    env = {**os.environ, "TFMLIB_PROGRESS": ""}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert run.stdout.split()[-1] == "False", run.stdout
