"""What the notebooks conclude from trained models, as statements about many runs, checked in code.

A trained model's numbers differ from seed to seed and from machine to machine: another CPU
adds floats in another order, and hundreds of training steps amplify the last bit into a
visible difference. One run cannot carry "on every seed". So `make sweep` (tools/sweep.py)
trains what notebooks 10, b1 and b2 train on 20 seeds, under the CPU's own kernels and under
the plain ones (`ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE`, a stand-in for another
CPU), and stores the raw numbers of every run in tfmlib/data/sweep.json. Four more seeds are
held back: they set no range and only count how often a new run lands outside one.

This module holds three things:

- the numbers of one run (`reverse_numbers`, `lab_numbers`, `count_non_words`, ...): what the
  sweep stores and what a notebook computes from the learner's own run;
- `CLAIMS`: every prose sentence of the notebooks about a trained result, beside the check of
  equal strength over the sweep (`Claim`). tests/test_claims.py asserts that each sentence is
  still in its notebook's markdown, that each check holds on the stored sweep, and that each
  fails on a run built to contradict it (so none is true by construction). `report` prints
  them in the notebooks;
- `show_run`: the learner's run beside the sweep's range ("your run: 100 %; 40 runs: 99-100 %,
  median 100 %"). It never raises in a learner's session: a run outside the range is said to
  be outside, and why that can happen. Only when TFMLIB_SWEEP_STRICT is set (make test's nbval
  runs) does a run outside the sweep's range, widened by a margin, fail the cell, so that CI
  still sees drift.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import statistics
from pathlib import Path
from typing import Callable

from .experiments import smoothed_loss_floor, summary
from .language_model import NOUNS
from .training import VOCAB

SWEEP_FILE = Path(__file__).parent / "data" / "sweep.json"
STRICT_ENV = "TFMLIB_SWEEP_STRICT"


class RunOutsideSweep(AssertionError):
    """Under TFMLIB_SWEEP_STRICT: this run's number fell outside the sweep's widened range."""


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def _blocks(values, size: int) -> list[float]:
    """The mean of each block of `size` consecutive values (one step's loss is noisy)."""
    return [_mean(values[i:i + size]) for i in range(0, len(values), size)]


def first_step_reaching(history: dict, threshold: float) -> int | None:
    """The first evaluation step whose held-out exact match is at least `threshold`, or None."""
    return next((step for step, match in zip(history["eval_step"], history["exact_match"])
                 if match >= threshold), None)


# ---- the numbers of one run: what the sweep stores and a notebook computes ------------------------

def reverse_numbers(history: dict) -> dict:
    """Notebook 10, section 5: `train`'s history -> the numbers its claims rest on."""
    loss = history["loss"]
    return {"loss_first": loss[0], "loss_steps_16_25": _mean(loss[15:25]), "loss_last": loss[-1],
            "loss_by_50_steps": _blocks(loss, 50), "exact_match": list(history["exact_match"]),
            "first_step_99": first_step_reaching(history, 0.99)}


def lab_numbers(record: dict) -> dict:
    """Notebook 10, section 9: one experiment's record -> the numbers its claims rest on."""
    return {**summary(record), "exact_match_curve": list(record["exact_match"]),
            "loss_by_10_steps": _blocks(record["loss"], 10)}


def _words(texts):
    """The words of `texts`. A sample starts and ends mid-word, so each text's first and last
    words are left out; a full stop ends a word."""
    return [word for text in texts for word in text.replace(".", " ").split(" ")[1:-1] if word]


def count_non_words(texts, words: set[str]) -> int:
    """How many words of `texts` are not in `words` (see `_words` for what counts as a word)."""
    return sum(word not in words for word in _words(texts))


def count_words(texts) -> int:
    """How many words `count_non_words` looks at in `texts`."""
    return len(_words(texts))


def _softmax(logits, temperature: float = 1.0) -> list[float]:
    top = max(logits)
    weights = [math.exp((x - top) / temperature) for x in logits]
    return [w / sum(weights) for w in weights]


def nucleus(probabilities: list[float], p: float) -> set[int]:
    """The indices top-p keeps: the smallest set of most likely ones holding at least p, ties at
    the cut kept (tfmlib.top_p_filter's rule, on plain floats)."""
    kept, held = [], 0.0
    for i in sorted(range(len(probabilities)), key=lambda i: -probabilities[i]):
        if held >= p and probabilities[i] < probabilities[kept[-1]]:
            break
        kept.append(i)
        held += probabilities[i]
    return set(kept)


# ---- the sweep ------------------------------------------------------------------------------------

@functools.cache
def load_sweep(path: str | None = None) -> dict:
    """The stored sweep (tfmlib/data/sweep.json, written by `make sweep`)."""
    return json.loads(Path(path or SWEEP_FILE).read_text())


def sweep_runs(sweep: dict, part: str, held_back: bool = False) -> list[dict]:
    """The numbers of every run of `part` on the sweep's seeds (or the held-back ones), under
    every kernel setting the sweep has for them."""
    seeds = sweep["held_back_seeds"] if held_back else sweep["seeds"]
    return [runs[str(seed)] for runs in sweep["runs"][part].values() for seed in seeds if str(seed) in runs]


def _describe(sweep: dict, part: str) -> str:
    return f"the sweep's {len(sweep_runs(sweep, part))} runs"


# ---- claims -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Claim:
    """One prose sentence about trained runs, and the check of equal strength over the sweep.

    `holds` says whether the sentence is true of one run (its numbers, as the sweep stores them);
    the claim holds when the share of the sweep's runs on which it is true lies in `share`:
    (1, 1) for "on every run", (0.25, 0.75) for "no winner: which is ahead changes with the
    seed". `contradict` changes a run's numbers so that a sweep of such runs fails the claim
    (for "on every run", the sentence is false of it; for "on fewer than half", true): the
    test's proof that the check can fail."""
    sentence: str
    part: str
    holds: Callable[[dict], bool]
    contradict: Callable[[dict], dict]
    share: tuple[float, float] = (1.0, 1.0)
    counts: str = ""        # what `holds` counts, where that is not the sentence itself


    def count(self, runs: list[dict]) -> int:
        return sum(bool(self.holds(run)) for run in runs)

    def check(self, runs: list[dict]) -> bool:
        low, high = self.share
        return low <= self.count(runs) / len(runs) <= high


def _replace(run: dict, path: tuple, value) -> dict:
    """A copy of `run` with the number at `path` (keys, then list indices) set to `value`."""
    run = json.loads(json.dumps(run))
    inner = run
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = value
    return run


def _final(run: dict, name: str) -> float:
    return run[name]["exact_match"]


def _loss(run: dict, name: str) -> float:
    return run[name]["loss"]


LN10, LN14 = math.log(10), math.log(14)


def _reverse_claims() -> list[Claim]:
    return [
        Claim("In the first 20 steps the loss falls from above `ln 14` to close to `ln 10 ≈ 2.3` "
              "(within 0.15, over steps 16-25)",
              "reverse", lambda r: r["loss_first"] > LN14 and abs(r["loss_steps_16_25"] - LN10) < 0.15,
              lambda r: _replace(r, ("loss_steps_16_25",), LN14)),
        Claim("trained on 3 to 10 digits, the model reverses at least 99 % of held-out sequences of "
              "3 to 10 digits exactly", "reverse", lambda r: r["exact_match"][-1] >= 0.99,
              lambda r: _replace(r, ("exact_match", -1), 0.98)),
        Claim("it takes a few hundred steps to get there (more than 200)", "reverse",
              lambda r: r["first_step_99"] is not None and 200 < r["first_step_99"] <= 500,
              lambda r: _replace(r, ("first_step_99",), 100)),
        Claim("the loss of the last step is below 0.05", "reverse", lambda r: r["loss_last"] < 0.05,
              lambda r: _replace(r, ("loss_last",), 0.1)),
    ]


def _example_claims() -> list[Claim]:
    return [Claim("the trained model reverses each held-out example of sections 6 and 7", "reverse",
                  lambda r: r["examples_right"] == r["examples"], lambda r: _replace(r, ("examples_right",), 5))]


def _length_claims() -> list[Claim]:
    acc = lambda r, n: r["accuracy_by_length"][str(n)]                          # noqa: E731
    return [
        Claim("At 10 digits, the longest it trained on, it is still right almost every time "
              "(at least 95 %)", "reverse", lambda r: acc(r, 10) >= 0.95,
              lambda r: _replace(r, ("accuracy_by_length", "10"), 0.9)),
        Claim("one digit more and it fails most of the time", "reverse", lambda r: acc(r, 11) < 0.5,
              lambda r: _replace(r, ("accuracy_by_length", "11"), 0.6)),
        Claim("at 12 digits it gets fewer than one in ten right", "reverse", lambda r: acc(r, 12) < 0.1,
              lambda r: _replace(r, ("accuracy_by_length", "12"), 0.2)),
    ]


def _lab_claims() -> dict[str, list[Claim]]:
    right = lambda r, a, b: _final(r, a) > _final(r, b)                           # noqa: E731
    lower = lambda r, a, b: _loss(r, a) < _loss(r, b)                             # noqa: E731
    early = lambda r, n: r[n]["early_loss"]                                       # noqa: E731
    regressor = lambda r: r["sum, regressor"]                                     # noqa: E731
    return {
        "10_training 9": [
            Claim(f"the baseline ends with {100 * BASELINE_RANGE[0]:.0f} to {100 * BASELINE_RANGE[1]:.0f} % of "
                  "the held-out sequences right", "lab",
                  lambda r: BASELINE_RANGE[0] <= _final(r, "baseline") <= BASELINE_RANGE[1],
                  lambda r: _replace(r, ("baseline", "exact_match"), 0.9)),
        ],
        "10_training 9.1": [
            Claim("the model without positions ends at a higher loss and answers at most half as "
                  "many sequences exactly", "lab",
                  lambda r: _loss(r, "no positions") > _loss(r, "baseline")
                  and _final(r, "no positions") <= 0.5 * _final(r, "baseline"),
                  lambda r: _replace(r, ("no positions", "exact_match"), _final(r, "baseline"))),
            Claim("Not none: a bag of digits still says *which* digits to write", "lab",
                  lambda r: _final(r, "no positions") > 0, lambda r: _replace(r, ("no positions", "exact_match"), 0.0)),
        ],
        "10_training 9.2": [
            Claim("four heads answer more held-out sequences exactly than one head, and end at a lower loss",
                  "lab", lambda r: right(r, "baseline", "1 head") and lower(r, "baseline", "1 head"),
                  lambda r: _replace(r, ("1 head", "exact_match"), _final(r, "baseline"))),
            Claim("at least twice as many on most runs", "lab",
                  lambda r: _final(r, "baseline") >= 2 * _final(r, "1 head"),
                  lambda r: _replace(r, ("1 head", "exact_match"), _final(r, "baseline")), MOST, "four heads at least twice as many right"),
        ],
        "10_training 9.2, 16 heads": [
            Claim("sixteen heads of `d_k = 2` end at a lower loss than four of `d_k = 8` on most runs", "lab",
                  lambda r: lower(r, "16 heads", "baseline"),
                  lambda r: _replace(r, ("16 heads", "loss"), _loss(r, "baseline") + 1), MOST, "16 heads at a lower loss"),
        ],
        "10_training 9.3": [
            Claim("Without the scaling it learns more slowly: a higher loss at the end", "lab",
                  lambda r: _loss(r, "no sqrt(d_k)") > _loss(r, "baseline"),
                  lambda r: _replace(r, ("no sqrt(d_k)", "loss"), _loss(r, "baseline") - 0.1)),
            Claim("fewer sequences exactly right on most runs", "lab", lambda r: right(r, "baseline", "no sqrt(d_k)"),
                  lambda r: _replace(r, ("no sqrt(d_k)", "exact_match"), 1.0), MOST, "fewer right without the scaling"),
        ],
        "10_training 9.4": [
            Claim("**Pre-LN** without warm-up brings the loss down faster in the first 20 steps", "lab",
                  lambda r: early(r, "Pre-LN, no warm-up") < early(r, "baseline"),
                  lambda r: _replace(r, ("Pre-LN, no warm-up", "early_loss"), 3.0)),
            Claim("At step 80 it ends at a lower loss on most runs", "lab",
                  lambda r: lower(r, "Pre-LN, no warm-up", "baseline"),
                  lambda r: _replace(r, ("Pre-LN, no warm-up", "loss"), 3.0), MOST, "no warm-up at a lower loss"),
            Claim("yet in exact answers there is no winner: it answers more sequences exactly on some "
                  "runs and fewer on others", "lab",
                  lambda r: right(r, "Pre-LN, no warm-up", "baseline"),
                  lambda r: _replace(r, ("Pre-LN, no warm-up", "exact_match"), 1.0), NO_WINNER, "no warm-up more right"),
            Claim("**Post-LN** with and without warm-up: no winner in exact answers", "lab",
                  lambda r: right(r, "Post-LN", "Post-LN, no warm-up"),
                  lambda r: _replace(r, ("Post-LN", "exact_match"), 0.0), NO_WINNER, "Post-LN with warm-up more right"),
            Claim("Post-LN against Pre-LN, both with warm-up: no winner in exact answers either", "lab",
                  lambda r: right(r, "Post-LN", "baseline"),
                  lambda r: _replace(r, ("Post-LN", "exact_match"), 0.0), NO_WINNER, "Post-LN more right than Pre-LN"),
            Claim("no run diverged: in every run of the four, the loss over the last 10 steps is "
                  "less than half the loss over the first 10", "lab",
                  lambda r: all(r[n]["loss_by_10_steps"][-1] < 0.5 * r[n]["loss_by_10_steps"][0]
                                for n in ("baseline", "Pre-LN, no warm-up", "Post-LN", "Post-LN, no warm-up")),
                  lambda r: _replace(r, ("Post-LN", "loss_by_10_steps", -1), 5.0)),
        ],
        "10_training 9.5": [
            Claim(f"the loss stalls above 1, and the model gets at most {100 * LR_X10_MOST:.0f} % of the "
                  "sequences right", "lab",
                  lambda r: _loss(r, "lr x10") > 1 and _final(r, "lr x10") <= LR_X10_MOST,
                  lambda r: _replace(r, ("lr x10", "exact_match"), 0.5)),
        ],
        "10_training 9.6": [
            Claim("most of the gap by construction: the smoothed loss less its floor is below the "
                  "baseline's loss", "lab",
                  lambda r: _loss(r, "label smoothing 0.1") - SMOOTHED_FLOOR < _loss(r, "baseline"),
                  lambda r: _replace(r, ("label smoothing 0.1", "loss"), 2.0)),
            Claim("In exact answers there is no winner: smoothing is ahead on some runs and behind on others",
                  "lab", lambda r: right(r, "label smoothing 0.1", "baseline"),
                  lambda r: _replace(r, ("label smoothing 0.1", "exact_match"), 0.0), NO_WINNER, "smoothing more right"),
            Claim("often by 5 points or more either way", "lab",
                  lambda r: abs(_final(r, "label smoothing 0.1") - _final(r, "baseline")) >= 0.05 - 1e-9,
                  lambda r: _replace(r, ("label smoothing 0.1", "exact_match"), _final(r, "baseline")), OFTEN, "5 points or more apart"),
        ],
        "10_training 9.7": [
            Claim("in 80 steps neither model learned to add (at most 5 % of the sums exactly right", "lab",
                  lambda r: max(_final(r, "sum"), _final(r, "sum, no positions")) <= 0.05,
                  lambda r: _replace(r, ("sum", "exact_match"), 0.2)),
            Claim("With positions, most answers are unchanged too", "lab",
                  lambda r: r["sum"]["unchanged_by_shuffle"] > 0.5,
                  lambda r: _replace(r, ("sum", "unchanged_by_shuffle"), 0.3)),
        ],
        "10_training 9.8": [
            Claim("the regressor gets more held-out sums exactly right after 80 steps than the "
                  "encoder-decoder", "lab", lambda r: right(r, "sum, regressor", "sum"),
                  lambda r: _replace(r, ("sum, regressor", "exact_match"), 0.0)),
        ],
        "10_training 9.8, no positions": [
            Claim("without positions it moves by less than 0.25", "lab",
                  lambda r: abs(_loss(r, "sum, no positions") - _loss(r, "sum")) < 0.25,
                  lambda r: _replace(r, ("sum, no positions", "loss"), _loss(r, "sum") + 0.5)),
            Claim("it goes down on some runs and up on others", "lab", lambda r: lower(r, "sum, no positions", "sum"),
                  lambda r: _replace(r, ("sum, no positions", "loss"), _loss(r, "sum") + 0.1), NO_WINNER, "a lower loss without positions"),
            Claim("The regressor's MSE does rise", "lab",
                  lambda r: _loss(r, "sum, regressor, no positions") > _loss(r, "sum, regressor"),
                  lambda r: _replace(r, ("sum, regressor, no positions", "loss"), 0.0)),
        ],
        "10_training 9.8, shuffled": [
            Claim(f"the regressor's error is about the same (within {100 * SHUFFLED_MSE_WITHIN:.0f} %", "lab",
                  lambda r: abs(regressor(r)["shuffled_mse"] - regressor(r)["held_out_mse"])
                  < SHUFFLED_MSE_WITHIN * regressor(r)["held_out_mse"],
                  lambda r: _replace(r, ("sum, regressor", "shuffled_mse"), 2 * regressor(r)["held_out_mse"])),
            Claim("Many rounded answers still change with the order (a fifth or more", "lab",
                  lambda r: regressor(r)["unchanged_by_shuffle"] <= 0.8,
                  lambda r: _replace(r, ("sum, regressor", "unchanged_by_shuffle"), 1.0)),
        ],
    }


#: The share of the sweep's runs a claim needs: "on most runs" more than half, "no winner"
#: between a fifth and four fifths (either way), "often" at least a third.
MOST = (0.51, 1.0)
NO_WINNER = (0.2, 0.8)
OFTEN = (0.33, 1.0)
SOME_NOT_ALL = (0.01, 0.99)
#: Ranges stated in the prose, read off the sweep and rounded outward to tens of percent.
BASELINE_RANGE = (0.2, 0.7)
LR_X10_MOST = 0.2
SHUFFLED_MSE_WITHIN = 0.25


#: notebook 10, 9.6: the least label-smoothed loss a model can reach.
SMOOTHED_FLOOR = smoothed_loss_floor(0.1, len(VOCAB))


def _b1_claims() -> list[Claim]:
    val = lambda r: r["val_loss"]                                                 # noqa: E731
    return [
        Claim("the model goes below the bigram within the first hundred steps", "language_model",
              lambda r: val(r)[0] < r["bigram"], lambda r: _replace(r, ("val_loss", 0), r["bigram"] + 0.1)),
        Claim("the validation loss goes down at every check", "language_model",
              lambda r: all(b < a for a, b in zip(val(r), val(r)[1:])),
              lambda r: _replace(r, ("val_loss", -1), val(r)[-2] + 0.01)),
        Claim("ends less than 0.25 nats per character above the floor", "language_model",
              lambda r: val(r)[-1] < r["floor"] + 0.25, lambda r: _replace(r, ("val_loss", -1), r["floor"] + 0.3)),
    ]


def _agreement_claims() -> list[Claim]:
    return [
        Claim("the model gives the right continuation more than 0.5 after each of them on most runs",
              "language_model",
              lambda r: min(p if "fox see" in k or "girl like" in k else 1 - p for k, p in r["p_s"].items()) > 0.5,
              lambda r: _replace(r, ("p_s", "the red fox see"), 0.2), MOST, "right after all four"),
    ]


def _b1_heads_claims() -> list[Claim]:
    heads_above_half = lambda r: sum(share > 0.5 for block in r["heads_on_subject_space"] for share in block)  # noqa: E731
    return [
        Claim("on some runs exactly one head does it in more than half of the sentences, on others "
              "none or two", "language_model", lambda r: heads_above_half(r) == 1,
              lambda r: _replace(r, ("heads_on_subject_space",), [[0.9] * 4, [0.9] * 4]), SOME_NOT_ALL, "exactly one head above half"),
    ]


def _prob(r: dict, key: str, temperature: float = 1.0) -> dict[str, float]:
    return dict(zip(r["chars"], _softmax(r[key], temperature)))


#: The characters that make a word after "the small b": i (bird) and o (boy).
WORD_LETTERS_AFTER_B = {noun[1] for noun in NOUNS["singular"] + NOUNS["plural"] if noun.startswith("b")}


def _tail(r: dict, temperature: float) -> float:
    p = _prob(r, "logits_after_b", temperature)
    return 1 - sum(p[c] for c in WORD_LETTERS_AFTER_B)


def _b2_claims() -> dict[str, list[Claim]]:
    nw = lambda r, name: r["non_words"][name]                                     # noqa: E731
    return {
        "b2_generation 1": [
            Claim("the 5 most likely characters after \"the small \" are the nouns' first letters", "language_model",
                  lambda r: {c for c, _ in sorted(_prob(r, "logits_after_prompt").items(), key=lambda kv: -kv[1])[:5]}
                  == set("bcdfg"), lambda r: _replace(r, ("logits_after_prompt", r["chars"].index("s")), 99.0)),
        ],
        "b2_generation 6": [
            Claim("greedy writes only words of the grammar on every run of the sweep", "language_model",
                  lambda r: nw(r, "greedy") == 0, lambda r: _replace(r, ("non_words", "greedy"), 1)),
            Claim("`T = 0.5` only words on most runs", "language_model", lambda r: nw(r, "T = 0.5") == 0,
                  lambda r: _replace(r, ("non_words", "T = 0.5"), 1), MOST, "T = 0.5 only words"),
            Claim("`T = 2` alone invents words", "language_model", lambda r: nw(r, "T = 2") > 0,
                  lambda r: _replace(r, ("non_words", "T = 2"), 0)),
            Claim("top-p 0.6 writes fewer non-words than `T = 2` alone", "language_model",
                  lambda r: nw(r, "T = 2, top-p 0.6") < nw(r, "T = 2"),
                  lambda r: _replace(r, ("non_words", "T = 2, top-p 0.6"), nw(r, "T = 2"))),
            Claim("at `T = 2` the misfits are drawn often enough to write non-words too", "language_model",
                  lambda r: nw(r, "T = 2, top-k 3") > 0, lambda r: _replace(r, ("non_words", "T = 2, top-k 3"), 0)),
        ],
        "b2_generation 6, one step": [
            Claim("at `T = 1` the characters that make no word hold less than 0.01, at `T = 2` "
                  "more than 0.03", "language_model", lambda r: _tail(r, 1.0) < 0.01 and _tail(r, 2.0) > 0.03,
                  lambda r: _replace(r, ("logits_after_b",), [0.0] * len(r["chars"]))),
            Claim("top-p 0.6 on the distribution at `T = 2` keeps only characters that make a word",
                  "language_model",
                  lambda r: {r["chars"][i] for i in nucleus(_softmax(r["logits_after_b"], 2.0), 0.6)}
                  <= WORD_LETTERS_AFTER_B,
                  lambda r: _replace(r, ("logits_after_b",), [0.0] * len(r["chars"]))),
        ],
        "b2_generation 7": [
            Claim("Same model, same generator seed: the same tokens", "language_model",
                  lambda r: all(r["same_tokens_with_cache"]), lambda r: _replace(r, ("same_tokens_with_cache", 0), False)),
            Claim("Restarting at 0 for every step is the classic bug: nothing crashes, the text just "
                  "gets worse", "language_model",
                  lambda r: r["non_words_positions_restarting"] > r["non_words"]["T = 0.5"],
                  lambda r: _replace(r, ("non_words_positions_restarting",), 0)),
        ],
        "b2_generation 7, window": [
            Claim("past 32 characters `generate` writes what the step-by-step loop writes", "language_model",
                  lambda r: r["sliding_window_same"], lambda r: _replace(r, ("sliding_window_same",), False)),
        ],
        "b2_generation Q3": [
            Claim("on most runs of the sweep `T = 0.01` wrote the greedy text", "language_model",
                  lambda r: r["cold_same_as_greedy"], lambda r: _replace(r, ("cold_same_as_greedy",), False), MOST, "the greedy text"),
            Claim("on some runs, not all, one of the 22 steps has a gap below 0.05", "language_model",
                  lambda r: min(r["greedy_top_gaps"]) < 0.05,
                  lambda r: _replace(r, ("greedy_top_gaps",), [1.0] * len(r["greedy_top_gaps"])), SOME_NOT_ALL, "a gap below 0.05"),
        ],
    }


#: Every prose sentence about a trained result, by notebook and section, beside its check.
CLAIMS: dict[str, list[Claim]] = {
    "10_training 5": _reverse_claims(),
    "10_training 6": _example_claims(),
    **_lab_claims(),
    "10_training Q2": _length_claims(),
    "b1_language_model 8": _b1_claims(),
    "b1_language_model 8, agreement": _agreement_claims(),
    "b1_language_model 9": _b1_heads_claims(),
    **_b2_claims(),
}


def report(key: str, sweep: dict | None = None) -> None:
    """Print the claims of one notebook section with how many of the sweep's runs bear each out.
    The numbers are the stored sweep's, the same on every machine; a learner's own run is
    `show_run`'s."""
    sweep = sweep or load_sweep()
    for claim in CLAIMS[key]:
        runs = sweep_runs(sweep, claim.part)
        count, verdict = claim.count(runs), "holds" if claim.check(runs) else "FAILS"
        counted = f"{claim.counts}: " if claim.counts else ""
        print(f"{verdict}: {claim.sentence}  [{counted}{count} of {len(runs)} runs]")


# ---- the learner's run against the sweep -------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Quantity:
    """A number of one run that a notebook shows against the sweep: how to read it from the
    run's numbers, how to print it, and `unit`, the smallest step it moves by (one sequence of
    200, one check of 50 steps), which the strict range adds on each side."""
    label: str
    part: str
    get: Callable[[dict], float]
    fmt: str
    unit: float


def sweep_range(quantity: Quantity, sweep: dict | None = None, held_back: bool = False) -> list[float]:
    return sorted(quantity.get(run) for run in sweep_runs(sweep or load_sweep(), quantity.part, held_back))


def strict_range(values: list[float], unit: float) -> tuple[float, float]:
    """The range a run must fall in under TFMLIB_SWEEP_STRICT: the sweep's, widened on each side
    by twice its own width plus one `unit`. A new seed or CPU is one more draw from the same spread,
    and of n runs one lands below the lowest so far about one time in n + 1: the margin makes
    that rare (the held-back seeds count how rare), while a change of the code that moves the
    results by more than the sweep's spread still fails."""
    low, high = values[0], values[-1]
    margin = 2 * (high - low) + unit
    return low - margin, high + margin


def show_run(quantities: list[Quantity], numbers: dict | list[dict], sweep: dict | None = None) -> None:
    """Print this run's value of each quantity beside the sweep's range and median. `numbers`
    is one run's numbers, or a list of runs (the lab's two seeds). Never raises in a learner's
    session; under TFMLIB_SWEEP_STRICT a value outside `strict_range` raises RunOutsideSweep."""
    sweep = sweep or load_sweep()
    runs = numbers if isinstance(numbers, list) else [numbers]
    outside, strict_failures = [], []
    for q in quantities:
        values = sweep_range(q, sweep)
        mine = [_stored(q.get(run)) for run in runs]      # as the sweep stores its own runs
        yours = ", ".join(q.fmt.format(v) for v in mine)
        print(f"{q.label}: your run{'s' if len(mine) > 1 else ''} {yours};  "
              f"{_describe(sweep, q.part)}: {q.fmt.format(values[0])} to {q.fmt.format(values[-1])}, "
              f"median {q.fmt.format(statistics.median(values))}")
        if any(not values[0] <= v <= values[-1] for v in mine):
            outside.append(q.label)
        low, high = strict_range(values, q.unit)
        strict_failures += [f"{q.label} = {v!r} outside [{low:.4g}, {high:.4g}]" for v in mine if not low <= v <= high]
    if outside:
        print(f"Outside the sweep's range: {', '.join(outside)}. That can happen: your run is one more "
              "seed on one more CPU, and the sweep shows where most runs land, not every possible one. "
              "The conclusions below are about the sweep's runs, not about yours alone.")
    if strict_failures and os.environ.get(STRICT_ENV):
        raise RunOutsideSweep(f"{STRICT_ENV} is set and this run is outside the sweep's widened range: "
                              + "; ".join(strict_failures) + ". Has a change of the code moved the "
                              "trained results? Then run `make sweep` again.")


def _stored(value: float) -> float:
    """`value` rounded as tools/sweep.py stores numbers (6 significant digits), so that a run the
    sweep holds compares equal to it."""
    return float(f"{value:.6g}")


def _first_step(r: dict) -> float:
    return r["first_step_99"] if r["first_step_99"] is not None else math.inf


QUANTITIES = {
    "10_training 5": [
        Quantity("first loss", "reverse", lambda r: r["loss_first"], "{:.2f}", 0.01),
        Quantity("loss, steps 16-25", "reverse", lambda r: r["loss_steps_16_25"], "{:.2f}", 0.01),
        Quantity("loss, last 50 steps", "reverse", lambda r: r["loss_by_50_steps"][-1], "{:.4f}", 0.001),
        Quantity("held-out exact match at the end", "reverse", lambda r: r["exact_match"][-1], "{:.1%}", 0.005),
        Quantity("first step at 99 % or more", "reverse", _first_step, "{:.0f}", 50),
    ],
    "10_training Q2": [Quantity(f"exact match at {n} digits", "reverse",
                                lambda r, n=n: r["accuracy_by_length"][str(n)], "{:.1%}", 0.005)
                       for n in (10, 11, 12)],
    "b1_language_model 8": [
        Quantity("validation loss at step 100", "language_model", lambda r: r["val_loss"][0], "{:.3f}", 0.01),
        Quantity("validation loss at step 500", "language_model", lambda r: r["val_loss"][-1], "{:.3f}", 0.01),
    ],
    "b2_generation 6": [Quantity(f"non-words, {name}", "language_model",
                                 lambda r, name=name: r["non_words"][name], "{:.0f}", 1)
                        for name in ("greedy", "T = 0.5", "T = 2", "T = 2, top-k 3", "T = 2, top-p 0.6")],
}


def lab_quantities(name: str) -> list[Quantity]:
    """The lab's table columns of experiment `name`, against the sweep."""
    return [Quantity(f"{name}, exact match", "lab", lambda r: r[name]["exact_match"], "{:.0%}", 0.01),
            Quantity(f"{name}, loss over the last 10 steps", "lab", lambda r: r[name]["loss"], "{:.2f}", 0.01)]


def held_back_report(sweep: dict | None = None) -> dict[str, int]:
    """{quantity: how many held-back runs fall outside the sweep's range / its strict range}:
    an estimate of how often a new seed or CPU would."""
    sweep = sweep or load_sweep()
    quantities = [q for qs in QUANTITIES.values() for q in qs]
    quantities += [q for name in sweep["runs"]["lab"]["native"]["0"] for q in lab_quantities(name)]
    found = {}
    for q in quantities:
        values = sweep_range(q, sweep)
        low, high = strict_range(values, q.unit)
        held = sweep_range(q, sweep, held_back=True)
        found[q.label] = (sum(not values[0] <= v <= values[-1] for v in held),
                          sum(not low <= v <= high for v in held), len(held))
    return found


def show_lab(results: dict, names) -> None:
    """`show_run` for the lab: each experiment's exact match and loss, on each seed the notebook
    trained, against the sweep's runs of that experiment."""
    seeds = sorted({seed for _, seed in results})
    runs = [{name: lab_numbers(results[name, seed]) for name in names} for seed in seeds]
    show_run([q for name in names for q in lab_quantities(name)], runs)
