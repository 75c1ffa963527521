"""The notebooks' conclusions about trained models hold over the seed sweep, say what their prose
says, and could fail; and new runs under other CPU settings stay within the sweep's ranges.

`make sweep` (tools/sweep.py) trained notebook 10's run, its lab and b1/b2's model on 20 seeds
under two kernel settings, plus 4 held-back seeds, and stored the raw numbers in
tfmlib/data/sweep.json. The claims (tfmlib.claims.CLAIMS) are functions of those numbers, so
most of this test trains nothing:

- each claim holds on the stored sweep;
- each claim fails on runs built to contradict it (none is true by construction);
- each claim's sentence is still in a markdown cell of its notebook, and each notebook section
  that reports claims has them;
- the held-back seeds fall inside the ranges a notebook's run is held to under nbval
  (TFMLIB_SWEEP_STRICT), so that those ranges do not make CI flaky.

Then a few fresh trainings (tests/claim_runs.py, one process each) measure drift under the
kernel settings that give other numbers on x86 but are not in the sweep: MKL_CBWR=COMPATIBLE
alone, ATEN_CPU_CAPABILITY=default alone, two threads, and ATEN_CPU_CAPABILITY=avx512 where this
CPU has it (decided when the tests are collected). Each run must bear out every "on every run"
claim and stay within the strict ranges.
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tfmlib import claims

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claim_runs import LM_CONFIG, PARTS, RECIPES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SWEEP = claims.load_sweep()
ALL_CLAIMS = [(key, i) for key, found in claims.CLAIMS.items() for i in range(len(found))]


def _claim(key: str, i: int) -> claims.Claim:
    return claims.CLAIMS[key][i]


# ---- the stored sweep ---------------------------------------------------------------------------

def test_the_sweep_says_how_it_was_made():
    assert SWEEP["command"].startswith("python tools/sweep.py")
    assert SWEEP["cpu"] and SWEEP["torch"].startswith("2.13.0") and re.fullmatch(r"[0-9a-f]{40}.*", SWEEP["commit"])
    assert SWEEP["settings"]["native"]["env"] == {}
    assert SWEEP["settings"]["emulated"]["env"] == {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
    assert SWEEP["held_back_seeds"] and not set(SWEEP["seeds"]) & set(SWEEP["held_back_seeds"])
    for part in PARTS:
        for setting, runs in SWEEP["runs"][part].items():
            # the notebooks' own seeds (0, and 1 for the lab) under both settings, and every seed
            # the JSON lists under at least one
            assert {"0", "1"} <= set(runs), (part, setting)
        assert all(any(str(s) in runs for runs in SWEEP["runs"][part].values())
                   for s in SWEEP["seeds"] + SWEEP["held_back_seeds"])


@pytest.mark.parametrize("key, i", ALL_CLAIMS, ids=[f"{k} #{i}" for k, i in ALL_CLAIMS])
def test_every_claim_holds_on_the_sweep(key, i):
    claim = _claim(key, i)
    runs = claims.sweep_runs(SWEEP, claim.part)
    assert claim.check(runs), (f"{key}: {claim.sentence!r} is true on {claim.count(runs)} of {len(runs)} "
                               f"runs of the sweep, outside the share {claim.share}")


@pytest.mark.parametrize("key, i", ALL_CLAIMS, ids=[f"{k} #{i}" for k, i in ALL_CLAIMS])
def test_every_claim_fails_on_runs_built_to_contradict_it(key, i):
    claim = _claim(key, i)
    runs = claims.sweep_runs(SWEEP, claim.part)
    contradicted = [claim.contradict(run) for run in runs]
    assert not claim.check(contradicted), f"{key}: {claim.sentence!r} cannot be false"


def _markdown(notebook: str) -> str:
    path = next((ROOT / "notebooks").rglob(f"{notebook}.ipynb"))
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


@pytest.mark.parametrize("key", sorted(claims.CLAIMS))
def test_every_claim_is_a_sentence_of_its_notebook(key):
    """The table beside the checks quotes the prose: a re-worded sentence fails here until its
    claim is re-worded (and re-checked) with it."""
    markdown = " ".join(_markdown(key.split()[0]).split())
    missing = [c.sentence for c in claims.CLAIMS[key] if " ".join(c.sentence.split()) not in markdown]
    assert not missing, f"{key}: not in the notebook's markdown: {missing}"


@pytest.mark.parametrize("notebook", ["10_training", "b1_language_model", "b2_generation"])
def test_every_reported_section_is_in_the_table_and_every_entry_is_reported(notebook):
    path = next((ROOT / "notebooks").rglob(f"{notebook}.ipynb"))
    code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
    reported = set(re.findall(r'claims\.report\("([^"]+)"\)', code))
    assert reported == {key for key in claims.CLAIMS if key.split()[0] == notebook}
    assert "claims.verify" not in code            # no single-run assertion left in a learner's notebook


def test_the_held_back_seeds_stay_within_the_strict_ranges():
    """The ranges that nbval holds a notebook's run to were set from the sweep's seeds only; the
    held-back seeds, each a new draw, estimate how often a new seed or CPU would fall outside."""
    report = claims.held_back_report(SWEEP)
    outside = {label: counts for label, counts in report.items() if counts[1]}
    assert not outside, f"held-back runs outside the strict range (outside sweep, outside strict, runs): {outside}"


def test_a_run_outside_the_sweep_is_shown_in_a_session_and_fails_only_under_strict(monkeypatch, capsys):
    quantity = claims.QUANTITIES["10_training 5"][3]                   # the final exact match
    run = claims.sweep_runs(SWEEP, "reverse")[0]
    far = claims._replace(run, ("exact_match", -1), 0.5)
    monkeypatch.delenv(claims.STRICT_ENV, raising=False)
    claims.show_run([quantity], far)
    assert "Outside the sweep's range" in capsys.readouterr().out
    monkeypatch.setenv(claims.STRICT_ENV, "1")
    with pytest.raises(claims.RunOutsideSweep, match="held-out exact match"):
        claims.show_run([quantity], far)
    claims.show_run([quantity], run)                                   # a sweep run is inside


# ---- fresh runs under CPU settings the sweep does not have ---------------------------------------

def _cpu_has_avx512() -> bool:
    try:
        return " avx512f " in f" {Path('/proc/cpuinfo').read_text()} "
    except OSError:
        return False


TWO_THREADS = {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}
#: Which part each setting re-runs, on a seed the sweep holds back: each trains once (20-70 s).
#: (The lab trains each experiment on one thread whatever the setting; b1 trains on as many as
#: the machine has, so two threads go to the language model.)
DRIFT = {
    "MKL_CBWR=COMPATIBLE alone": ("reverse", {"OMP_NUM_THREADS": "1", "MKL_CBWR": "COMPATIBLE"}),
    "ATEN_CPU_CAPABILITY=default alone": ("lab", {"OMP_NUM_THREADS": "1", "ATEN_CPU_CAPABILITY": "default"}),
    "native, 2 threads": ("language_model", TWO_THREADS),
}
if _cpu_has_avx512():                      # only where the CPU has it: no test skipped elsewhere
    DRIFT["ATEN_CPU_CAPABILITY=avx512"] = ("reverse", {"OMP_NUM_THREADS": "1", "ATEN_CPU_CAPABILITY": "avx512"})


@pytest.mark.slow
@pytest.mark.parametrize("setting", sorted(DRIFT))
def test_a_fresh_run_under_another_cpu_setting_bears_out_the_claims(setting):
    part, env_settings = DRIFT[setting]
    seed = SWEEP["held_back_seeds"][0]
    env = {k: v for k, v in os.environ.items()
           if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "TFMLIB_RUN_CACHE")}
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "claim_runs.py"), part, str(seed)],
                         env=env | env_settings, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    numbers = json.loads(run.stdout.strip().splitlines()[-1])
    broken = [c.sentence for cs in claims.CLAIMS.values() for c in cs
              if c.part == part and c.share == (1.0, 1.0) and not c.holds(numbers)]
    assert not broken, f"{setting}, seed {seed}: these claims are false of the run: {broken}"
    quantities = [q for qs in claims.QUANTITIES.values() for q in qs if q.part == part]
    if part == "lab":
        quantities = [q for name in numbers for q in claims.lab_quantities(name)]
    outside = []
    for q in quantities:
        low, high = claims.strict_range(claims.sweep_range(q, SWEEP), q.unit)
        if not low <= q.get(numbers) <= high:
            outside.append(f"{q.label} = {q.get(numbers)} outside [{low:.4g}, {high:.4g}]")
    assert not outside, f"{setting}, seed {seed}: {outside}"


# ---- the notebooks train with the arguments the sweep re-runs -------------------------------------

def _calls(notebook: str, function: str) -> list[ast.Call]:
    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("%"))
    return [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name) and node.func.id == function]


def _keywords(call: ast.Call) -> dict:
    """The call's keyword arguments that are literals (`vocab_size=V` is left out)."""
    return {k.arg: ast.literal_eval(k.value) for k in call.keywords if isinstance(k.value, ast.Constant)}


def test_notebook_10_trains_with_the_recipe_the_claims_are_tested_on():
    (call,) = _calls("10_training.ipynb", "train")
    assert _keywords(call) == RECIPES["train"] | {"seed": 0}


@pytest.mark.parametrize("notebook", ["bonus/b1_language_model.ipynb", "bonus/b2_generation.ipynb"])
def test_the_language_model_is_trained_with_the_recipe_the_claims_are_tested_on(notebook):
    (call,) = _calls(notebook, "train_lm")
    expected = RECIPES["train_lm"] | {"seed": 0}
    if "b2" in notebook:  # b2 trains b1's model without scoring the validation text
        expected.pop("eval_every")
    assert _keywords(call) == expected
    config = _calls(notebook, "LMConfig")[0]          # the trained model's (b2 times a wider one later)
    assert _keywords(config) == LM_CONFIG


def test_the_claims_top_p_on_stored_logits_is_the_courses_top_p_filter():
    import torch

    from tfmlib import top_p_filter
    for run in claims.sweep_runs(SWEEP, "language_model"):
        for key in ("logits_after_prompt", "logits_after_b"):
            for temperature, p in [(1.0, 0.5), (1.0, 0.9), (2.0, 0.6)]:
                logits = torch.tensor(run[key], dtype=torch.float64) / temperature
                kept = set((top_p_filter(logits, p) > -torch.inf).nonzero().flatten().tolist())
                assert claims.nucleus(claims._softmax(run[key], temperature), p) == kept
