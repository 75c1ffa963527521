"""Notebook 07: position-wise FFN, inverted dropout, residual add and LayerNorm."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tfmlib import (dropout, feed_forward, init_ffn_params, init_norm_params, layer_norm, linear,
                    residual_sublayer)

TIGHT = dict(rtol=1e-10, atol=1e-12)


# ---- LayerNorm ------------------------------------------------------------------------------

@pytest.mark.parametrize("eps", [1e-5, 1e-3, 0.5])
@pytest.mark.parametrize("shape", [(5,), (3, 7), (2, 3, 5), (2, 1, 4, 6)])
def test_layer_norm_matches_f_layer_norm(shape, eps, gen):
    x = 3 + 2 * torch.randn(*shape, generator=gen, dtype=torch.float64)
    gamma = torch.randn(shape[-1], generator=gen, dtype=torch.float64)
    beta = torch.randn(shape[-1], generator=gen, dtype=torch.float64)
    got = layer_norm(x, gamma, beta, eps)
    torch.testing.assert_close(got, F.layer_norm(x, shape[-1:], gamma, beta, eps), **TIGHT)


def test_layer_norm_default_eps_and_identity_params_normalise_each_row(gen):
    x = torch.randn(4, 6, 10, generator=gen, dtype=torch.float64) * 5 + 1
    norm = init_norm_params(10, dtype=torch.float64)
    out = layer_norm(x, norm["gamma"], norm["beta"])
    torch.testing.assert_close(out, F.layer_norm(x, (10,)), **TIGHT)  # eps 1e-5 like nn.LayerNorm
    torch.testing.assert_close(out.mean(-1), torch.zeros(4, 6, dtype=torch.float64), rtol=0, atol=1e-12)
    # biased variance (divide by D): the variance of each row is 1 up to eps
    torch.testing.assert_close(out.var(-1, unbiased=False), torch.ones(4, 6, dtype=torch.float64),
                               rtol=0, atol=1e-5)


def test_layer_norm_gradients_match(gen):
    x = torch.randn(3, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    gamma = torch.randn(5, generator=gen, dtype=torch.float64, requires_grad=True)
    beta = torch.randn(5, generator=gen, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    ours = torch.autograd.grad(layer_norm(x, gamma, beta), (x, gamma, beta), upstream)
    theirs = torch.autograd.grad(F.layer_norm(x, (5,), gamma, beta), (x, gamma, beta), upstream)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, **TIGHT)


# ---- feed-forward ---------------------------------------------------------------------------

@pytest.mark.parametrize("activation, torch_activation", [("relu", nn.ReLU()), ("gelu", nn.GELU())])
@pytest.mark.parametrize("shape, d_ff", [((3, 5, 6), 10), ((1, 1, 4), 3), ((2, 7), 9)])
def test_feed_forward_matches_nn_linear_reference(shape, d_ff, activation, torch_activation, gen):
    d_model = shape[-1]
    up = nn.Linear(d_model, d_ff, dtype=torch.float64)
    down = nn.Linear(d_ff, d_model, dtype=torch.float64)
    reference = nn.Sequential(up, torch_activation, down)
    params = {"w_1": up.weight.detach(), "b_1": up.bias.detach(),
              "w_2": down.weight.detach(), "b_2": down.bias.detach()}
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    got = feed_forward(x, params, activation)
    assert got.shape == shape
    torch.testing.assert_close(got, reference(x).detach(), **TIGHT)


def test_feed_forward_is_position_wise(gen):
    params = init_ffn_params(4, 8, generator=gen, dtype=torch.float64)
    x = torch.randn(2, 5, 4, generator=gen, dtype=torch.float64)
    whole = feed_forward(x, params)
    for pos in range(5):  # each token on its own gives the same answer
        torch.testing.assert_close(whole[:, pos], feed_forward(x[:, pos:pos + 1], params)[:, 0], **TIGHT)


def test_init_ffn_params_shapes_and_bounds():
    params = init_ffn_params(6, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert params["w_1"].shape == (10, 6) and params["b_1"].shape == (10,)
    assert params["w_2"].shape == (6, 10) and params["b_2"].shape == (6,)
    for name, fan_in in (("w_1", 6), ("b_1", 6), ("w_2", 10), ("b_2", 10)):
        assert params[name].abs().max() <= fan_in ** -0.5
        assert params[name].dtype == torch.float64


# ---- dropout --------------------------------------------------------------------------------

@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_is_inverted_kept_entries_are_x_over_keep_prob(p, gen):
    x = torch.randn(7, 9, generator=gen, dtype=torch.float64) + 0.1  # no exact zeros in x
    out = dropout(x, p, generator=gen)
    kept = out != 0
    assert kept.any() and (~kept).any()
    torch.testing.assert_close(out[kept], x[kept] / (1 - p), rtol=1e-14, atol=0)


@pytest.mark.parametrize("p", [0.1, 0.3, 0.6])
def test_dropout_drops_a_fraction_p_and_preserves_the_mean(p):
    generator = torch.Generator().manual_seed(0)
    x = torch.ones(400, 500, dtype=torch.float64)  # 200 000 entries
    out = dropout(x, p, generator=generator)
    dropped = (out == 0).double().mean().item()
    assert abs(dropped - p) < 0.01
    assert abs(out.mean().item() - 1.0) < 0.02


def test_dropout_identity_when_not_training_or_p_zero(gen):
    x = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    assert torch.equal(dropout(x, 0.5, training=False), x)
    assert torch.equal(dropout(x, 0.0, training=True), x)
    assert torch.equal(dropout(x, 0, generator=gen), x)


def test_dropout_with_a_seeded_generator_is_reproducible():
    x = torch.randn(50, 40, dtype=torch.float64)
    first = dropout(x, 0.4, generator=torch.Generator().manual_seed(3))
    second = dropout(x, 0.4, generator=torch.Generator().manual_seed(3))
    other = dropout(x, 0.4, generator=torch.Generator().manual_seed(4))
    assert torch.equal(first, second)
    assert not torch.equal(first, other)


def test_dropout_keeps_dtype_and_device(device):
    x = torch.ones(30, 30, device=device, dtype=torch.float32)
    out = dropout(x, 0.5)
    assert out.dtype == torch.float32 and out.device.type == device.type
    assert set(out.unique().tolist()) <= {0.0, 2.0}


# ---- residual + LayerNorm -------------------------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True])
def test_residual_sublayer_post_ln_and_pre_ln(norm_first, gen):
    x = torch.randn(3, 4, 6, generator=gen, dtype=torch.float64)
    weight = torch.randn(6, 6, generator=gen, dtype=torch.float64)
    norm = {"gamma": torch.randn(6, generator=gen, dtype=torch.float64),
            "beta": torch.randn(6, generator=gen, dtype=torch.float64)}
    sublayer = lambda h: linear(h, weight)  # noqa: E731
    ln = lambda h: F.layer_norm(h, (6,), norm["gamma"], norm["beta"], 1e-5)  # noqa: E731
    expected = x + sublayer(ln(x)) if norm_first else ln(x + sublayer(x))
    got = residual_sublayer(x, sublayer, norm, norm_first=norm_first)
    torch.testing.assert_close(got, expected, **TIGHT)


def test_residual_sublayer_dropout_only_in_training(gen):
    x = torch.randn(3, 4, 6, generator=gen, dtype=torch.float64)
    norm = init_norm_params(6, dtype=torch.float64)
    sublayer = lambda h: 2 * h  # noqa: E731
    evaluated = residual_sublayer(x, sublayer, norm, norm_first=True, dropout_p=0.5, training=False)
    torch.testing.assert_close(evaluated, x + sublayer(F.layer_norm(x, (6,))), **TIGHT)
    trained = residual_sublayer(x, sublayer, norm, norm_first=True, dropout_p=0.5, training=True,
                                generator=torch.Generator().manual_seed(0))
    again = residual_sublayer(x, sublayer, norm, norm_first=True, dropout_p=0.5, training=True,
                              generator=torch.Generator().manual_seed(0))
    assert torch.equal(trained, again)
    update = trained - x  # Pre-LN: dropout acts on the update, never on the residual path
    full = sublayer(F.layer_norm(x, (6,)))
    kept = update.abs() > 1e-12
    assert kept.any() and (~kept).any()
    torch.testing.assert_close(update[kept], 2 * full[kept], **TIGHT)
