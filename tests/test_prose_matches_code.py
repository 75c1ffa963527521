"""Numbers in the notebooks' prose that name a configuration agree with the code that runs.

A sentence like "`train` repeats that step 500 times" drifts when the recipe changes and the
prose does not (notebook 10 once said its model had `d_k = 16`; it has 8). Each row below
finds one such number in a notebook's markdown and reads the value it must have from the
code: the library's constants, `train`'s defaults, or the arguments the notebook passes.
Also: every function the ten notebooks teach is public from the top level, as the README says.
"""
from __future__ import annotations

import inspect
import json
import re
import sys
from pathlib import Path

import pytest

import tfmlib
from tfmlib import experiments, train
from tfmlib.adam import warmup_steps_for
from tfmlib.training import ModelConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claim_runs import LM_CONFIG, RECIPES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAIN = RECIPES["train"]
LAB, LAB_RUN = experiments.LAB_CONFIG, experiments.LAB_TRAINING
SIXTEEN_HEADS = experiments.TABLE_EXPERIMENTS["16 heads"].model_config()
LAB_EXPERIMENT_COUNT = len(experiments.EXPERIMENTS) + len(experiments.TABLE_EXPERIMENTS)
LM = RECIPES["train_lm"]
DEFAULTS = {name: p.default for name, p in inspect.signature(train).parameters.items()}


def _number(text: str) -> float:
    return float(text)


#: (notebook, pattern with one group: the number, the value the code gives it)
PROSE = [
    ("10_training.ipynb", r"`train` repeats that step (\d+) times", TRAIN["steps"]),
    ("10_training.ipynb", r"a fresh batch of (\d+) training sequences", TRAIN["batch_size"]),
    ("10_training.ipynb", r"training sequences of (\d+) to \d+ digits", TRAIN["min_len"]),
    ("10_training.ipynb", r"training sequences of \d+ to (\d+) digits", TRAIN["max_len"]),
    ("10_training.ipynb", r"rises over the first (\d+) steps \(warm-up\)", warmup_steps_for(TRAIN["steps"])),
    ("10_training.ipynb", r"to its peak `lr = ([\d.e-]+)`", TRAIN["lr"]),
    ("10_training.ipynb", r"every (\d+) steps the model greedily decodes", DEFAULTS["eval_every"]),
    ("10_training.ipynb", r"greedily decodes (\d+) held-out sequences", DEFAULTS["eval_size"]),
    ("10_training.ipynb", r"`D = (\d+)`, `H = \d+`, `V = \d+`", ModelConfig().d_model),
    ("10_training.ipynb", r"`D = \d+`, `H = (\d+)`, `V = \d+`", ModelConfig().num_heads),
    ("10_training.ipynb", r"a model with `d_model` (\d+), one encoder", LAB.d_model),
    ("10_training.ipynb", r"one encoder and one decoder layer and (\d+) heads", LAB.num_heads),
    ("10_training.ipynb", r"trained for (\d+) steps on sequences of", LAB_RUN["steps"]),
    ("10_training.ipynb", r"on sequences of (\d+) to \d+ digits, about a second", LAB_RUN["min_len"]),
    ("10_training.ipynb", r"on sequences of \d+ to (\d+) digits, about a second", LAB_RUN["max_len"]),
    ("10_training.ipynb", r"or four with `d_k = (\d+)`", LAB.d_model // LAB.num_heads),
    ("10_training.ipynb", r"one head with `d_k = (\d+)`", LAB.d_model),
    ("10_training.ipynb", r"because `d_k = (\d+)` makes the missing factor", LAB.d_model // LAB.num_heads),
    ("10_training.ipynb", r"warm-up over the first (\d+) of \d+ steps", warmup_steps_for(LAB_RUN["steps"])),
    ("10_training.ipynb", r"warm-up over the first \d+ of (\d+) steps", LAB_RUN["steps"]),
    ("10_training.ipynb", r"Sixteen heads of `d_k = (\d+)`", LAB.d_model // SIXTEEN_HEADS.num_heads),
    ("10_training.ipynb", r"sixteen heads of `d_k = (\d+)` end at", LAB.d_model // SIXTEEN_HEADS.num_heads),
    ("10_training.ipynb", r"Fourteen experiments on two seeds make (\d+) runs", 2 * LAB_EXPERIMENT_COUNT),
    ("10_training.ipynb", r"\((\d+) short trainings\)", 2 * LAB_EXPERIMENT_COUNT),
    ("10_training.ipynb", r"Ten times the lab's peak, ([\d.]+)",
     dict(experiments.EXPERIMENTS["lr x10"].training)["lr"]),
    ("09_adam.ipynb", r"`train` peaks at `lr = ([\d.e-]+)`", TRAIN["lr"]),
    ("09_adam.ipynb", r"The model of notebook 10 is tiny \(`d_model = (\d+)`", ModelConfig().d_model),
    ("09_adam.ipynb", r"trains for only (\d+) steps, so a large step", TRAIN["steps"]),
    ("bonus/b1_language_model.ipynb", r"The model's size: `D = (\d+)`", LM_CONFIG["d_model"]),
    ("bonus/b1_language_model.ipynb", r"`D = \d+`, (\d+) heads", LM_CONFIG["num_heads"]),
    ("bonus/b1_language_model.ipynb", r"an FFN of width (\d+)", LM_CONFIG["d_ff"]),
    ("bonus/b1_language_model.ipynb", r"(\d+) blocks, and a context", LM_CONFIG["num_layers"]),
    ("bonus/b1_language_model.ipynb", r"a context of (\d+) characters", LM_CONFIG["max_len"]),
    ("bonus/b1_language_model.ipynb", r"this model: (\d+) steps, each on a fresh batch", LM["steps"]),
    ("bonus/b1_language_model.ipynb", r"a fresh batch of (\d+) random windows", LM["batch_size"]),
    ("bonus/b1_language_model.ipynb", r"random windows of (\d+) training characters",
     LM_CONFIG["max_len"] + 1),
    ("bonus/b1_language_model.ipynb", r"warmed up over the first (\d+) steps", warmup_steps_for(LM["steps"])),
    ("bonus/b1_language_model.ipynb", r"steps to `([\d.e-]+)` and then decayed", LM["lr"]),
    ("bonus/b1_language_model.ipynb", r"Every (\d+) steps it measures the loss", LM["eval_every"]),
]


def _markdown(notebook: str) -> str:
    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


@pytest.mark.parametrize("notebook, pattern, value", PROSE, ids=[p for _, p, _ in PROSE])
def test_a_number_in_the_prose_is_the_codes(notebook, pattern, value):
    found = re.findall(pattern, _markdown(notebook))
    assert found, f"{notebook}: the prose no longer says /{pattern}/: update this table"
    assert all(_number(text) == value for text in found), \
        f"{notebook}: the prose says {found} where the code has {value} (/{pattern}/)"


def test_the_table_checks_the_defaults_the_notebook_relies_on():
    """train's defaults are notebook 10's recipe, which tests/test_claims.py checks against the call."""
    assert {k: DEFAULTS[k] for k in TRAIN} == TRAIN


def test_what_the_notebooks_teach_is_public_from_the_top_level():
    """The README: `from tfmlib import multi_head_attention`. Every exercise's reference, and the
    training functions notebook 10 builds on, import from the top level."""
    from tfmlib.exercises import REGISTRY
    references = [e.reference for e in REGISTRY.values() if inspect.isfunction(e.reference)]
    assert len(references) > 30
    taught = {f.__name__ for f in references if f.__module__.startswith("tfmlib.")
              and not f.__module__.startswith("tfmlib.exercises")}
    taught |= {"train", "ModelConfig", "forward", "shift_right", "label_smoothed_cross_entropy"}
    assert taught - set(tfmlib.__all__) == set()
