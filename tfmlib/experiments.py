"""Notebook 10's experiments lab: change one thing, train again, compare the learning curves.

Every experiment is a short training of a small "lab" model (`LAB_CONFIG`, `LAB_TRAINING`)
with one change. `run` trains one experiment on one seed; `run_all` trains many, on several
processes at once, and gives the same numbers as running them one after the other; `start`
does the same in the background, while the caller goes on. The encoder-only regressor of the
sum (`init_regressor`, `regress`, `train_regressor`) lives here too: it shares the embedding
and the encoder stack with the encoder-decoder.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import torch
import torch.nn.functional as F

from ._runcache import cached_run
from ._validation import require_keys, require_ndim
from .adam import adam_init, adam_step, warmup_cosine_lr, warmup_steps_for, zero_grad
from .encoder_decoder import encoder, init_encoder_layer_params
from .masks import padding_mask
from .multihead import linear
from .sublayers import init_norm_params
from .training import (FIRST_DIGIT_ID, PAD_ID, VOCAB, ModelConfig, attention_layers,
                       embed_with_positions, greedy_decode, make_batch, parameters, train)
from .tokenization import decode

#: The lab's model: d_model 32, one layer per stack, so that one run of LAB_TRAINING takes
#: about a second on one CPU core. Every field is given, none left to a default.
LAB_CONFIG = ModelConfig(vocab_size=len(VOCAB), d_model=32, num_heads=4, d_ff=64, num_layers=1,
                         max_len=16, norm_first=True, dropout_p=0.0, positional=True,
                         scale_scores=True)

#: The lab's training: 80 steps on 2 to 4 digits, judged every 20 steps on 100 held-out sequences.
LAB_TRAINING = dict(task="reverse", steps=80, batch_size=64, lr=2e-2, min_len=2, max_len=4,
                    eval_every=20, eval_size=100, warmup=True, label_smoothing=0.0)


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One change to the lab's baseline: fields of LAB_CONFIG and/or arguments of train.

    model is "seq2seq" (the encoder-decoder, trained by `train`) or "regressor" (the
    encoder-only model that mean-pools and regresses the sum, trained by `train_regressor`).
    """
    config: tuple = ()      # (field, value) pairs replacing LAB_CONFIG's
    training: tuple = ()    # (argument, value) pairs replacing LAB_TRAINING's
    model: str = "seq2seq"

    def model_config(self) -> ModelConfig:
        return dataclasses.replace(LAB_CONFIG, **dict(self.config))

    def train_options(self) -> dict:
        return {**LAB_TRAINING, **dict(self.training)}

    def changes(self) -> str:
        """What differs from the baseline, e.g. 'num_heads=1, lr=0.1'."""
        model = [("model", self.model)] if self.model != "seq2seq" else []
        pairs = [*self.config, *self.training, *model]
        return ", ".join(f"{key}={value!r}" for key, value in pairs) or "(the baseline)"


EXPERIMENTS = {
    "baseline": Experiment(),
    "no positions": Experiment(config=(("positional", False),)),
    "1 head": Experiment(config=(("num_heads", 1),)),
    "no sqrt(d_k)": Experiment(config=(("scale_scores", False),)),
    "Pre-LN, no warm-up": Experiment(training=(("warmup", False),)),
    "Post-LN": Experiment(config=(("norm_first", False),)),
    "Post-LN, no warm-up": Experiment(config=(("norm_first", False),), training=(("warmup", False),)),
    "lr x10": Experiment(training=(("lr", 0.2),)),
    "label smoothing 0.1": Experiment(training=(("label_smoothing", 0.1),)),
    "sum": Experiment(training=(("task", "sum"),)),
    "sum, no positions": Experiment(config=(("positional", False),), training=(("task", "sum"),)),
    "sum, regressor": Experiment(training=(("task", "sum"),), model="regressor"),
}

#: Experiments the notebook reports in tables only. The figures and the overlay widget draw
#: EXPERIMENTS, each in its own colour (tfmlib.viz.style.EXPERIMENT_COLOURS); these have none.
TABLE_EXPERIMENTS = {
    "16 heads": Experiment(config=(("num_heads", 16),)),
    "sum, regressor, no positions": Experiment(config=(("positional", False),),
                                               training=(("task", "sum"),), model="regressor"),
}


# ---- running experiments ----------------------------------------------------------------------

@cached_run  # only under `make test` (tfmlib/_runcache.py)
def run(name: str, seed: int) -> dict:
    """Train experiment `name` with `seed` on one CPU thread (bit-reproducible) -> its record:
    {"name", "seed", "step", "loss", "eval_step", "exact_match"}; the sum task adds
    "shuffled_exact_match" and "unchanged_by_shuffle" (`shuffle_test`, `regressor_shuffle_test`)."""
    experiment = _experiment(name)
    config, options = experiment.model_config(), experiment.train_options()
    with _one_thread():
        if experiment.model == "regressor":
            params, history = train_regressor(config, seed=seed, **options)
            history.update(regressor_shuffle_test(params, config, seed, options))
        else:
            params, history = train(config, seed=seed, **options)
            if options["task"] == "sum":
                history.update(shuffle_test(params, config, seed, options))
    return {"name": name, "seed": seed, **history}


def run_all(names, seeds=(0, 1), workers: int = 2) -> dict:
    """Every (name, seed) pair -> {(name, seed): record}; `workers` processes train at once."""
    return start(names, seeds, workers).results()


class LabRuns:
    """Runs handed to worker processes by `start`; `results()` waits for them all."""

    def __init__(self, jobs: list, pool: ProcessPoolExecutor | None):
        self._jobs, self._pool = jobs, pool
        self._futures = [pool.submit(run, name, seed) for name, seed in jobs] if pool else None

    def results(self) -> dict:
        if self._pool is None:
            records = [run(name, seed) for name, seed in self._jobs]
        else:
            records = [future.result() for future in self._futures]
            self._pool.shutdown()
        return {(r["name"], r["seed"]): r for r in records}


def start(names, seeds=(0, 1), workers: int = 2) -> LabRuns:
    """Start training every (name, seed) pair on `workers` processes and return at once, so
    that the runs go on while the caller does other work; `.results()` collects them.

    The workers are started with "spawn" (a fresh Python importing torch), never "fork": a
    fork of a process whose torch thread pool is running can hang. Each run is on one
    thread, so the records are the same for any number of workers. With workers <= 1 the
    runs happen in this process, when `.results()` is called.
    """
    jobs = [(name, seed) for name in names for seed in seeds]
    for name, _ in jobs:
        _experiment(name)                                   # unknown names fail here, not in a worker
    if workers <= 1:
        return LabRuns(jobs, None)
    context = multiprocessing.get_context("spawn")
    return LabRuns(jobs, ProcessPoolExecutor(max_workers=workers, mp_context=context))


def _experiment(name: str) -> Experiment:
    known = EXPERIMENTS | TABLE_EXPERIMENTS
    if name not in known:
        raise ValueError(f"name: expected one of {list(known)}, got {name!r}")
    return known[name]


@contextlib.contextmanager
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def summary(record: dict) -> dict:
    """The numbers the notebook prints for one run: the last held-out exact match, the mean
    training loss of the first 20 and of the last 10 steps (one step's loss is noisy), and
    the shuffle test's numbers when the run has them."""
    loss = record["loss"]
    numbers = {"exact_match": record["exact_match"][-1],
               "early_loss": sum(loss[:20]) / len(loss[:20]),
               "loss": sum(loss[-10:]) / len(loss[-10:])}
    return numbers | {key: record[key] for key in SHUFFLE_TEST_KEYS if key in record}


SHUFFLE_TEST_KEYS = ("shuffled_exact_match", "unchanged_by_shuffle", "held_out_mse", "shuffled_mse")

#: The columns `table` can print: heading, and how a number is written.
COLUMNS = {"exact_match": ("exact match", "{:.0%}"),
           "early_loss": ("loss, steps 1-20", "{:.2f}"),
           "loss": ("loss, last 10 steps", "{:.2f}"),
           "shuffled_exact_match": ("exact match, shuffled", "{:.0%}"),
           "unchanged_by_shuffle": ("answers unchanged by the shuffle", "{:.0%}"),
           "held_out_mse": ("MSE, held out", "{:.1f}"),
           "shuffled_mse": ("MSE, shuffled", "{:.1f}")}


def table(results: dict, names, columns=("exact_match", "loss")) -> str:
    """One line per experiment and seed of run_all's results, the `columns` of `summary`."""
    seeds = sorted({seed for _, seed in results})
    width = max(22, *(len(name) + 1 for name in names))                    # the names column
    lines = [f"{'experiment':{width}}{'seed':>5}   " + "   ".join(COLUMNS[c][0] for c in columns)]
    for name in names:
        for seed in seeds:
            numbers = summary(results[name, seed])
            cells = [COLUMNS[c][1].format(numbers[c]).strip().center(len(COLUMNS[c][0]))
                     for c in columns]
            lines.append((f"{name:{width}}{seed:>5}   " + "   ".join(cells)).rstrip())
    return "\n".join(lines)


def smoothed_loss_floor(smoothing: float, vocab_size: int) -> float:
    """The least label-smoothed cross-entropy a model can reach: the entropy of the smoothed
    target (1 - smoothing + smoothing / V on the label, smoothing / V on each other class)."""
    on, off = 1 - smoothing + smoothing / vocab_size, smoothing / vocab_size
    return -(on * math.log(on) + (vocab_size - 1) * off * math.log(off))


# ---- the sum task with the source shuffled -----------------------------------------------------

def shuffle_digits(src: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """(B, Ls) ids -> the same digits of each row in a random order; padding stays at the end."""
    require_ndim("src", src, 2, "(B, Ls)")
    shuffled = src.clone()
    for row in shuffled:
        length = int((row != PAD_ID).sum())
        row[:length] = row[:length][torch.randperm(length, generator=generator)]
    return shuffled


def held_out_and_shuffled(seed: int, options: dict):
    """The held-out batch that `train` and `train_regressor` score with `seed` -> src (B, Ls),
    tgt (B, Lt), and src with each row's digits shuffled (B, Ls)."""
    src, tgt = make_batch(options["task"], options["eval_size"], options["min_len"],
                          options["max_len"], True, torch.Generator().manual_seed(seed + 1))
    return src, tgt, shuffle_digits(src, torch.Generator().manual_seed(seed + 2))


def shuffle_test(params: dict, config: ModelConfig, seed: int, options: dict) -> dict:
    """Greedy answers to the held-out sources of `train`, in their order and shuffled ->
    {"shuffled_exact_match", "unchanged_by_shuffle"}: the exact match on the shuffled sources
    (a sum does not depend on the order) and the fraction of answers that did not change."""
    src, tgt, shuffled = held_out_and_shuffled(seed, options)
    steps = tgt.size(1) - 1
    before = greedy_decode(params, src, config, max_new_tokens=steps)         # (B, Lt)
    after = greedy_decode(params, shuffled, config, max_new_tokens=steps)
    answers = [decode(row, VOCAB) for row in after]
    hits = [a == decode(t, VOCAB) for a, t in zip(answers, tgt)]
    same = [a == decode(b, VOCAB) for a, b in zip(answers, before)]
    return {"shuffled_exact_match": sum(hits) / len(hits),
            "unchanged_by_shuffle": sum(same) / len(same)}


# ---- the encoder-only regressor of the sum (seed 004) ----------------------------------------

REGRESSOR_KEYS = ("embedding", "encoder", "encoder_norm", "head_weight", "head_bias")
#: The head predicts the sum in tens: sums of up to 4 digits reach 36, and a head that had to
#: output 36 itself would need weights far larger than the lr moves them in 80 steps.
SUM_UNIT = 10.0


def init_regressor(config: ModelConfig, generator: torch.Generator | None = None,
                   dtype: torch.dtype = torch.float32, device=None) -> dict:
    """The encoder half of the model plus a linear head (1, D) -> one number per sequence."""
    kwargs = dict(generator=generator, dtype=dtype, device=device)
    d = config.d_model
    params = {
        "embedding": torch.randn(config.vocab_size, d, **kwargs) / math.sqrt(d),
        "encoder": [init_encoder_layer_params(d, config.d_ff, **kwargs)
                    for _ in range(config.num_layers)],
        "encoder_norm": init_norm_params(d, dtype, device),
        "head_weight": torch.randn(1, d, **kwargs) / math.sqrt(d),
        "head_bias": torch.zeros(1, dtype=dtype, device=device),
    }
    for p in parameters(params):
        p.requires_grad_()
    return params


def masked_mean(hidden: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """(B, L, D) vectors, (B, L) ids -> (B, D): the mean over each row's non-pad positions only
    (a plain mean over L would mix the padding's vectors in, more of them for shorter rows)."""
    keep = (src != PAD_ID).unsqueeze(-1).to(hidden.dtype)                      # (B, L, 1)
    return (hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1)           # (B, D)


def regress(params: dict, src: torch.Tensor, config: ModelConfig) -> torch.Tensor:
    """(B, Ls) source ids -> (B,) predicted sums: encode, mean-pool over the digits, project."""
    _check_regress_inputs(params, src, config)
    x = embed_with_positions(params, src, config)                              # (B, Ls, D)
    hidden = encoder(x, attention_layers(params, "encoder", config), config.num_heads,
                     padding_mask(src, PAD_ID), final_norm=params["encoder_norm"],
                     norm_first=config.norm_first)                             # (B, Ls, D)
    pooled = masked_mean(hidden, src)                                          # (B, D)
    tens = linear(pooled, params["head_weight"], params["head_bias"]).squeeze(-1)  # (B,)
    return SUM_UNIT * tens


def regressor_shuffle_test(params: dict, config: ModelConfig, seed: int, options: dict) -> dict:
    """`shuffle_test` for the regressor: its predictions for the held-out sources of
    `train_regressor`, in their order and shuffled -> {"shuffled_exact_match",
    "unchanged_by_shuffle"} (of the rounded predictions), and the held-out MSE of both,
    {"held_out_mse", "shuffled_mse"}: a model that learned the sum scores the same on both."""
    src, _, shuffled = held_out_and_shuffled(seed, options)
    sums = digit_sums(src)                                                     # (B,)
    with torch.no_grad():
        before, after = regress(params, src, config), regress(params, shuffled, config)   # (B,)
    return {"shuffled_exact_match": (after.round() == sums).float().mean().item(),
            "unchanged_by_shuffle": (after.round() == before.round()).float().mean().item(),
            "held_out_mse": F.mse_loss(before, sums).item(),
            "shuffled_mse": F.mse_loss(after, sums).item()}


def _check_regress_inputs(params, src, config) -> None:
    require_keys("params", params, REGRESSOR_KEYS)
    require_ndim("src", src, 2, "(B, Ls)")
    if src.size(1) > config.max_len:  # the positional table has config.max_len rows
        raise ValueError(f"src: expected at most config.max_len = {config.max_len} tokens per row, "
                         f"got shape {tuple(src.shape)}")


def digit_sums(src: torch.Tensor) -> torch.Tensor:
    """(B, Ls) source ids -> (B,) float sums of their digits, padding ignored."""
    digits = (src - FIRST_DIGIT_ID).masked_fill(src == PAD_ID, 0)
    return digits.sum(dim=1).float()


def train_regressor(config: ModelConfig, *, task: str, steps: int, batch_size: int, lr: float,
                    min_len: int, max_len: int, seed: int, eval_every: int, eval_size: int,
                    warmup: bool = True, label_smoothing: float = 0.0) -> tuple[dict, dict]:
    """Train the regressor with MSE; the history has train's keys: "loss" is the MSE and
    "exact_match" the share of held-out sums that the rounded prediction gets right."""
    if task != "sum" or label_smoothing:
        raise ValueError(f"task, label_smoothing: the regressor learns the sum with MSE, "
                         f"got task={task!r}, label_smoothing={label_smoothing!r}")
    generator = torch.Generator().manual_seed(seed)
    params = init_regressor(config, generator)
    weights = parameters(params)
    state = adam_init(weights)
    eval_src, _ = make_batch(task, eval_size, min_len, max_len, True,
                             torch.Generator().manual_seed(seed + 1))
    history = {"step": [], "loss": [], "eval_step": [], "exact_match": []}
    for step in range(1, steps + 1):
        src, _ = make_batch(task, batch_size, min_len, max_len, False, generator)
        loss = F.mse_loss(regress(params, src, config), digit_sums(src))
        zero_grad(weights)
        loss.backward()
        warmup_steps = warmup_steps_for(steps) if warmup else 1
        adam_step(weights, state, lr=warmup_cosine_lr(step, lr, warmup_steps, steps))
        history["step"].append(step)
        history["loss"].append(loss.item())
        if step % eval_every == 0 or step == steps:
            with torch.no_grad():
                hits = regress(params, eval_src, config).round() == digit_sums(eval_src)
            history["eval_step"].append(step)
            history["exact_match"].append(hits.float().mean().item())
    return params, history
