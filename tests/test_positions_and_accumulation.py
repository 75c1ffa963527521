"""What notebooks 03, 07 and 10 show about positions, LayerNorm's conventions and gradient
accumulation, checked on more cases than the one a notebook prints.

- 03: one rotation matrix moves every row of the sinusoidal encoding k positions on; RoPE's
  score of a vector with itself falls with distance on average (it is 2 * PE[0] . PE[k]), that of
  unrelated vectors does not.
- 07: LayerNorm with eps outside the root, or with x.std() + eps, is close to F.layer_norm on
  ordinary tokens and far from it on a token whose features are almost equal.
- 10: without positions, neither the regressor nor the encoder-decoder can tell "3 5" from
  "3 5 3 5" (the length is lost); gradients accumulated over pieces of a batch, each weighted by
  its share of the counted positions, are the whole batch's; the lab's table-only experiments.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from tfmlib import apply_rope, sinusoidal_positional_encoding, zero_grad
from tfmlib import experiments as lab
from tfmlib.training import (VOCAB, ModelConfig, digits_to_ids, forward, init_model, make_batch,
                             parameters, sequence_loss, shift_right)


# ---- 03: the sinusoidal encoding's shift matrix, RoPE and distance -------------------------------

def _shift_matrix(k: int, d_model: int) -> torch.Tensor:
    omega = 10000 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    cos, sin = torch.cos(k * omega), torch.sin(k * omega)
    blocks = torch.stack([torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1)], -2)
    return torch.block_diag(*blocks)


@pytest.mark.parametrize("d_model, k", [(16, 3), (4, 1), (64, 17), (10, 40)])
def test_one_rotation_moves_every_row_of_pe_k_positions_on(d_model, k):
    pe = sinusoidal_positional_encoding(80, d_model, dtype=torch.float64)
    shift = _shift_matrix(k, d_model)
    assert torch.allclose(pe[:-k] @ shift.T, pe[k:], atol=1e-10)
    assert torch.allclose(shift @ shift.T, torch.eye(d_model, dtype=torch.float64), atol=1e-12)
    assert not torch.allclose(pe[:-k], pe[k:], atol=1e-3)       # the shift does move the rows


@pytest.mark.parametrize("d_model", [16, 64])
def test_rope_expected_self_score_is_twice_the_pe_similarity(d_model):
    """E[q . R_k q] over q ~ N(0, I) is trace(R_k), summed here over the basis vectors exactly."""
    distances = torch.arange(60)
    basis = torch.eye(d_model, dtype=torch.float64)                           # (D, D): rows e_j
    rotated = apply_rope(basis[:, None, :].expand(-1, len(distances), -1), distances)  # (D, K, D)
    trace = torch.einsum("jkd,jd->k", rotated, basis)                         # (K,)
    pe = sinusoidal_positional_encoding(60, d_model, dtype=torch.float64)
    assert torch.allclose(trace, 2 * pe @ pe[0], atol=1e-9)


def test_rope_scores_fall_with_distance_on_average_only_for_related_vectors():
    distances = torch.arange(100)
    gen = torch.Generator().manual_seed(5)
    queries, others = torch.randn(2000, 64, generator=gen), torch.randn(2000, 64, generator=gen)

    def mean_scores(keys):
        placed = apply_rope(keys[:, None, :].expand(-1, len(distances), -1), distances)
        return (placed @ queries[:, :, None])[..., 0].mean(dim=0) / 64       # (K,)

    itself, unrelated = mean_scores(queries), mean_scores(others)
    assert itself.argmax() == 0
    assert itself[1:11].mean() > itself[50:].mean() + 0.2
    assert (itself[1:] < itself[:-1]).any()                                   # not steadily
    assert unrelated.abs().max() < 0.05                                       # nothing to fall


# ---- 07: LayerNorm's conventions ------------------------------------------------------------------

def _eps_outside(t):
    centred = t - t.mean(dim=-1, keepdim=True)
    return centred / (t.var(dim=-1, keepdim=True, unbiased=False).sqrt() + 1e-5)


def _std_plus_eps(t):
    centred = t - t.mean(dim=-1, keepdim=True)
    return centred / (t.std(dim=-1, keepdim=True) + 1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_layer_norm_conventions_part_only_on_almost_flat_tokens(seed):
    gen = torch.Generator().manual_seed(seed)
    ordinary = torch.randn(3, 8, 16, generator=gen)
    almost_flat = 3 + 0.001 * torch.randn(1, 1, 16, generator=gen)
    reference = lambda t: F.layer_norm(t, (16,))                              # noqa: E731
    assert (_eps_outside(ordinary) - reference(ordinary)).abs().max() < 1e-3
    unbiased_factor = (16 / 15) ** 0.5                                        # std divides by D - 1
    assert torch.allclose(_std_plus_eps(ordinary) * unbiased_factor, reference(ordinary), atol=1e-3)
    for convention in (_eps_outside, _std_plus_eps):
        assert (convention(almost_flat) - reference(almost_flat)).abs().max() > 0.5


# ---- 10: the length is lost without positions ---------------------------------------------------

@pytest.mark.parametrize("digits, repeated", [("3 5", "3 5 3 5"), ("7", "7 7 7"), ("1 2", "2 1 2 1")])
@pytest.mark.parametrize("seed", [0, 1])
def test_without_positions_a_repeated_source_looks_the_same(digits, repeated, seed):
    short, long = digits_to_ids(digits), digits_to_ids(repeated)
    reads = torch.tensor([[VOCAB["<bos>"], VOCAB["4"], VOCAB["2"]]])
    for positional in (False, True):
        config = dataclasses.replace(lab.LAB_CONFIG, positional=positional)
        regressor = lab.init_regressor(config, torch.Generator().manual_seed(seed))
        model = init_model(config, torch.Generator().manual_seed(seed))
        with torch.no_grad():
            same_sum = torch.allclose(lab.regress(regressor, short, config),
                                      lab.regress(regressor, long, config), atol=1e-5)
            same_logits = torch.allclose(forward(model, short, reads, config),
                                         forward(model, long, reads, config), atol=1e-5)
        assert same_sum == same_logits == (not positional), (positional, same_sum, same_logits)


def test_the_regressors_shuffle_test():
    options = {**lab.LAB_TRAINING, "task": "sum", "steps": 20, "eval_every": 20}
    for positional in (False, True):
        config = dataclasses.replace(lab.LAB_CONFIG, positional=positional)
        params, _ = lab.train_regressor(config, seed=0, **options)
        found = lab.regressor_shuffle_test(params, config, 0, options)
        assert set(found) == {"shuffled_exact_match", "unchanged_by_shuffle", "held_out_mse", "shuffled_mse"}
        if not positional:                                   # order-blind: the shuffle changes nothing
            assert found["unchanged_by_shuffle"] == 1.0
            assert found["shuffled_mse"] == pytest.approx(found["held_out_mse"], rel=1e-5)
        else:
            assert found["shuffled_mse"] != found["held_out_mse"]


def test_table_only_experiments_change_what_they_declare_and_print_aligned():
    assert not set(lab.TABLE_EXPERIMENTS) & set(lab.EXPERIMENTS)
    base = dataclasses.asdict(lab.LAB_CONFIG)
    for name, experiment in lab.TABLE_EXPERIMENTS.items():
        config = dataclasses.asdict(experiment.model_config())
        options = experiment.train_options()
        changed = {k for k in config if config[k] != base[k]}
        changed |= {k for k in options if options[k] != lab.LAB_TRAINING[k]}
        assert changed == {k for k, _ in experiment.config + experiment.training}, name
    record = {"step": [1, 2], "loss": [2.0, 1.0], "eval_step": [2], "exact_match": [0.5]}
    names = ["baseline", "sum, regressor, no positions"]
    lines = lab.table({(n, 0): record for n in names}, names).splitlines()
    assert len({line.index("50%") for line in lines[1:]}) == 1              # one column, every row


# ---- 10: gradient accumulation ------------------------------------------------------------------

@pytest.mark.parametrize("seed, pieces", [(2, 4), (3, 2), (4, 8)])
def test_accumulated_gradients_weighted_by_counted_positions_are_the_whole_batchs(seed, pieces):
    config = ModelConfig()
    params = init_model(config, torch.Generator().manual_seed(seed))
    weights = parameters(params)
    src, tgt = make_batch("reverse", 64, 3, 10, held_out=False, generator=torch.Generator().manual_seed(seed))
    tgt_in, labels = shift_right(tgt)
    counted = labels != VOCAB["<pad>"]

    def gradients(share=None):
        zero_grad(weights)
        if share is None:
            sequence_loss(forward(params, src, tgt_in, config), labels).backward()
        for rows in torch.arange(64).split(64 // pieces) if share else ():
            (sequence_loss(forward(params, src[rows], tgt_in[rows], config), labels[rows]) * share(rows)).backward()
        return [w.grad.clone() for w in weights]

    whole = gradients()
    by_count = gradients(lambda rows: counted[rows].sum() / counted.sum())
    equal = gradients(lambda rows: 1 / pieces)
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(by_count, whole))
    assert not all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(equal, whole))
