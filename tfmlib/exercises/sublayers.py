"""Exercises of notebook 07: FFN, dropout, LayerNorm and the residual sublayer.

How each check calls the learner's function:
    feed_forward(x, params)                            -> (B, L, D); ReLU between the layers
    dropout(x, p, training)                            -> same shape as x (judged by behaviour)
    layer_norm(x, gamma, beta, eps)                    -> same shape as x
    residual_sublayer(x, sublayer, norm, norm_first=...)  -> (B, L, D)

Dropout is random, so its check never compares numbers with the reference: it turns
the output into facts that any correct implementation shares, whatever random numbers
it draws (every entry is 0 or x / (1 - p); about a fraction p is zeroed, with a fresh
draw per entry; training=False and p = 0 give x back).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..sublayers import dropout, feed_forward, layer_norm, residual_sublayer
from .core import Case, Exercise, Mistake, register
from .multihead import _linear_untransposed


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_ffn_params(d_model: int, d_ff: int, g: torch.Generator) -> dict:
    return {"w_1": torch.randn(d_ff, d_model, generator=g) / d_model ** 0.5,
            "b_1": 0.3 * torch.randn(d_ff, generator=g),
            "w_2": torch.randn(d_model, d_ff, generator=g) / d_ff ** 0.5,
            "b_2": 0.3 * torch.randn(d_model, generator=g)}


def random_norm_params(d_model: int, g: torch.Generator) -> dict:
    """gamma and beta far from 1 and 0, and different per feature, so that each one shows."""
    return {"gamma": 1.0 + 0.5 * torch.randn(d_model, generator=g),
            "beta": 0.5 * torch.randn(d_model, generator=g)}


# ---- feed_forward -----------------------------------------------------------------------------

def _ffn_cases() -> list[Case]:
    g = _generator(70)
    return [Case("(2, 5, 6), d_ff = 10", (torch.randn(2, 5, 6, generator=g), random_ffn_params(6, 10, g))),
            Case("(3, 1, 4), d_ff = 7", (torch.randn(3, 1, 4, generator=g), random_ffn_params(4, 7, g))),
            Case("(1, 4, 8), d_ff = d_model = 8", (torch.randn(1, 4, 8, generator=g),
                                                  random_ffn_params(8, 8, g)))]


def _ffn_variant(project=None, activation=F.relu, relu_at_end=False, biases=True):
    def project_default(x, w, b):
        return x @ w.T + b if biases else x @ w.T
    project = project or project_default

    def variant(x, params, activation_name="relu"):
        hidden = activation(project(x, params["w_1"], params["b_1"]))
        out = project(hidden, params["w_2"], params["b_2"])
        return F.relu(out) if relu_at_end else out
    return variant


register(Exercise(
    name="feed_forward",
    reference=feed_forward,
    make_cases=_ffn_cases,
    mistakes=[
        Mistake("no activation between the two layers",
                "apply ReLU to the hidden (B, L, d_ff) layer: without it the two layers are one linear map",
                _ffn_variant(activation=lambda h: h)),
        Mistake("x @ W instead of x @ W.T",
                "w_1 is stored (d_ff, D) and w_2 (D, d_ff), (out, in): multiply by the transpose",
                _ffn_variant(project=_linear_untransposed)),
        Mistake("ReLU after the second layer as well",
                "only the hidden layer gets the activation; the output goes back to the residual "
                "stream as it is, negative values included",
                _ffn_variant(relu_at_end=True)),
        Mistake("biases left out",
                "each layer adds its bias: x @ w_1.T + b_1, then hidden @ w_2.T + b_2",
                _ffn_variant(biases=False)),
    ],
))


# ---- dropout ----------------------------------------------------------------------------------

_FRACTION_TOLERANCE = 0.04  # >= 7 standard deviations of the fraction on the cases' tensors


def _away_from_zero(shape, g: torch.Generator) -> torch.Tensor:
    """Entries in +-[0.5, 1.5): a zero in the output can only mean "dropped"."""
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)
    return sign * (0.5 + torch.rand(shape, generator=g))


def _dropout_cases() -> list[Case]:
    g = _generator(71)
    return [Case("training, p = 0.3, x (5, 37, 41)", (_away_from_zero((5, 37, 41), g), 0.3, True)),
            Case("training, p = 0.1, x (4, 31, 53)", (_away_from_zero((4, 31, 53), g), 0.1, True)),
            Case("training=False (evaluation), p = 0.3", (_away_from_zero((5, 37, 41), g), 0.3, False)),
            Case("training, p = 0: nothing to drop", (_away_from_zero((3, 7, 11), g), 0.0, True))]


def _fraction_zeroed(dropped: torch.Tensor, p: float) -> str:
    fraction = dropped.float().mean().item()
    if fraction == 0.0:
        return "none"
    if fraction == 1.0:
        return "all"
    if abs(fraction - p) < _FRACTION_TOLERANCE:
        return "about p"
    if abs(fraction - (1 - p)) < _FRACTION_TOLERANCE:
        return "about 1 - p"
    return "neither p nor 1 - p"


def _kept_scale(x: torch.Tensor, y: torch.Tensor, kept: torch.Tensor):
    count = int(kept.sum())
    if count == 0:
        return "nothing kept"
    ratios = (y / x).double()  # x has no zeros
    if not torch.isfinite(torch.where(kept, ratios, 1.0)).all():
        return "not finite"
    low = torch.where(kept, ratios, float("inf")).min().item()
    high = torch.where(kept, ratios, float("-inf")).max().item()
    if high - low > 1e-4 * max(1.0, abs(high)):
        return "not one common factor"
    return float(torch.where(kept, ratios, 0.0).sum().item() / count)


def _mask_repeated(dropped: torch.Tensor) -> bool:
    """True when every slice along some axis has the same zero pattern (one mask broadcast)."""
    if not dropped.any() or dropped.all():
        return False
    return any(dropped.size(axis) > 1 and bool((dropped == dropped.narrow(axis, 0, 1)).all())
               for axis in range(dropped.dim()))


def _dropout_facts(fn, case: Case):
    """Run the learner's dropout and describe its output by facts that do not depend on the RNG."""
    x, p, training = case.args
    y = fn(x.clone(), p, training)
    if not isinstance(y, torch.Tensor):
        return y  # None or a wrong type: the engine reports it
    facts = {"shape": tuple(y.shape)}
    keys = ("contains NaN", "returns x unchanged", "one mask repeated along an axis",
            "fraction zeroed", "kept entries scaled by")
    if y.shape != x.shape or not y.is_floating_point():
        facts.update({key: f"n/a (output {tuple(y.shape)}, {str(y.dtype).replace('torch.', '')})"
                      for key in keys})
        return facts
    y = y.detach().to(x.dtype)
    dropped = y == 0
    facts[keys[0]] = bool(torch.isnan(y).any())
    facts[keys[1]] = bool(torch.allclose(y, x, rtol=1e-6, atol=0.0))
    facts[keys[2]] = repeated = _mask_repeated(dropped)
    # a repeated mask has few independent draws: its zeroed fraction is too noisy to judge
    facts[keys[3]] = "not judged (one mask repeated)" if repeated else _fraction_zeroed(dropped, p)
    facts[keys[4]] = _kept_scale(x, y, ~dropped)
    return facts


def _dropout_variant(scale=lambda p: 1 / (1 - p), ignore_training=False, flipped=False,
                     mask_shape=lambda x: x.shape):
    def variant(x, p, training=True):
        if (not training and not ignore_training) or p == 0.0:
            return x
        draw = torch.rand(mask_shape(x))
        keep = draw < p if flipped else draw >= p
        return x * keep * scale(p)
    return variant


def _dropout_by_p(x, p, training=True):
    if not training:
        return x
    keep = torch.rand(x.shape) >= p
    return x * keep / p


register(Exercise(
    name="dropout",
    reference=dropout,
    make_cases=_dropout_cases,
    run=_dropout_facts,
    mistakes=[
        Mistake("scaled by the drop probability p instead of the keep probability",
                "survivors are divided by the keep probability 1 - p, not by p: x * keep / (1 - p)",
                _dropout_by_p),
        Mistake("survivors not rescaled",
                "inverted dropout divides the kept entries by 1 - p, so the expected output stays x",
                _dropout_variant(scale=lambda p: 1.0)),
        Mistake("multiplied by the keep probability instead of divided",
                "divide the kept entries by 1 - p (that makes them bigger), do not multiply",
                _dropout_variant(scale=lambda p: 1 - p)),
        Mistake("dropout active when training=False",
                "at evaluation dropout is the identity: `if not training: return x`",
                _dropout_variant(ignore_training=True)),
        Mistake("keep test flipped: drops a fraction 1 - p",
                "keep an entry when rand >= p (probability 1 - p); rand < p keeps only a fraction p",
                _dropout_variant(flipped=True)),
        Mistake("one mask shared by every token",
                "draw the mask with the shape of x (torch.rand(x.shape) or torch.rand_like(x)), "
                "not of one axis",
                _dropout_variant(mask_shape=lambda x: x.shape[-1:])),
    ],
))


# ---- layer_norm -------------------------------------------------------------------------------

def _norm_case(label, shape, scale, offset, eps, g):
    x = offset + scale * torch.randn(*shape, generator=g)
    norm = random_norm_params(shape[-1], g)
    return Case(label, (x, norm["gamma"], norm["beta"], eps))


def _layer_norm_cases() -> list[Case]:
    g = _generator(72)
    return [_norm_case("(2, 5, 8)", (2, 5, 8), 1.0, 0.0, 1e-5, g),
            _norm_case("(3, 4, 6), small spread: eps matters", (3, 4, 6), 0.01, 2.0, 1e-5, g),
            _norm_case("one sentence, L = D: (1, 6, 6), eps = 1e-3", (1, 6, 6), 0.1, -1.0, 1e-3, g),
            _norm_case("(2, 3, 7), eps = 0.1", (2, 3, 7), 1.0, 0.5, 0.1, g)]


def _layer_norm_variant(dims=-1, unbiased=False, keepdim=True, denominator=None, affine="normal"):
    def variant(x, gamma, beta, eps=1e-5):
        mean = x.mean(dim=dims, keepdim=keepdim)
        variance = x.var(dim=dims, keepdim=keepdim, unbiased=unbiased)
        std = denominator(variance, eps) if denominator else torch.sqrt(variance + eps)
        normalized = (x - mean) / std
        if affine == "swapped":
            return normalized * beta + gamma
        if affine == "none":
            return normalized
        return normalized * gamma + beta
    return variant


def _layer_norm_std(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    return (x - mean) / (x.std(dim=-1, keepdim=True) + eps) * gamma + beta


register(Exercise(
    name="layer_norm",
    reference=layer_norm,
    make_cases=_layer_norm_cases,
    mistakes=[
        Mistake("unbiased variance",
                "LayerNorm divides by D, not D - 1: x.var(dim=-1, keepdim=True, unbiased=False)",
                _layer_norm_variant(unbiased=True)),
        Mistake("variance squared",
                "the variance is already a mean of squares: divide by torch.sqrt(variance + eps), "
                "no ** 2",
                _layer_norm_variant(denominator=lambda var, eps: torch.sqrt(var ** 2 + eps))),
        Mistake("divided by the variance, not the standard deviation",
                "take the square root: (x - mean) / torch.sqrt(variance + eps)",
                _layer_norm_variant(denominator=lambda var, eps: var + eps)),
        Mistake("eps outside the square root",
                "eps goes inside the root: torch.sqrt(variance + eps), not torch.sqrt(variance) + eps",
                _layer_norm_variant(denominator=lambda var, eps: torch.sqrt(var) + eps)),
        Mistake("x.std(): unbiased, and eps outside the root",
                "x.std() divides by D - 1; use torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=False) + eps)",
                _layer_norm_std),
        Mistake("normalised over the sequence axis (dim=1)",
                "each token is normalised over its own features: mean and variance over dim=-1",
                _layer_norm_variant(dims=1)),
        Mistake("keepdim=True forgotten",
                "keep the reduced axis, mean(dim=-1, keepdim=True) -> (B, L, 1), so it broadcasts "
                "against (B, L, D)",
                _layer_norm_variant(keepdim=False)),
        Mistake("gamma and beta swapped",
                "scale by gamma, then shift by beta: normalized * gamma + beta",
                _layer_norm_variant(affine="swapped")),
        Mistake("gamma and beta not applied",
                "after normalising, scale and shift: normalized * gamma + beta",
                _layer_norm_variant(affine="none")),
    ],
))


# ---- residual_sublayer ------------------------------------------------------------------------

class _TanhFFN:
    """A small nonlinear sublayer (B, L, D) -> (B, L, D) for the cases; prints without an address."""

    def __init__(self, d_model: int, g: torch.Generator):
        self.w_1 = torch.randn(2 * d_model, d_model, generator=g) / d_model ** 0.5
        self.w_2 = torch.randn(d_model, 2 * d_model, generator=g) / (2 * d_model) ** 0.5

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        return torch.tanh(h @ self.w_1.T) @ self.w_2.T

    def __repr__(self) -> str:
        return "sublayer (B, L, D) -> (B, L, D)"


def _residual_cases() -> list[Case]:
    g = _generator(73)
    cases = []
    for label, shape, norm_first in (("Post-LN, (2, 5, 6)", (2, 5, 6), False),
                                     ("Pre-LN, (3, 4, 8)", (3, 4, 8), True),
                                     ("Post-LN, (1, 7, 10)", (1, 7, 10), False),
                                     ("Pre-LN, (2, 3, 5)", (2, 3, 5), True)):
        x = 1.5 * torch.randn(*shape, generator=g) + 0.5
        cases.append(Case(label, (x, _TanhFFN(shape[-1], g), random_norm_params(shape[-1], g)),
                          {"norm_first": norm_first}))
    return cases


def _ln(x, norm):
    return layer_norm(x, norm["gamma"], norm["beta"])


def _post_ln(x, sublayer, norm):
    return _ln(x + sublayer(x), norm)


def _pre_ln(x, sublayer, norm):
    return x + sublayer(_ln(x, norm))


def _residual_variant(post=_post_ln, pre=_pre_ln):
    def variant(x, sublayer, norm, norm_first=False):
        return pre(x, sublayer, norm) if norm_first else post(x, sublayer, norm)
    return variant


register(Exercise(
    name="residual_sublayer",
    reference=residual_sublayer,
    make_cases=_residual_cases,
    mistakes=[
        Mistake("Pre-LN and Post-LN swapped",
                "Post-LN (norm_first=False): LayerNorm(x + sublayer(x)); "
                "Pre-LN (norm_first=True): x + sublayer(LayerNorm(x))",
                _residual_variant(post=_pre_ln, pre=_post_ln)),
        Mistake("norm_first ignored: always Post-LN",
                "with norm_first=True normalise first and leave the residual path alone: "
                "x + sublayer(LayerNorm(x))",
                _residual_variant(pre=_post_ln)),
        Mistake("norm_first ignored: always Pre-LN",
                "with norm_first=False (the 2017 paper) add first, then normalise: LayerNorm(x + sublayer(x))",
                _residual_variant(post=_pre_ln)),
        Mistake("Post-LN: the residual added after the norm",
                "Post-LN normalises the sum: LayerNorm(x + sublayer(x)), not x + LayerNorm(sublayer(x))",
                _residual_variant(post=lambda x, sublayer, norm: x + _ln(sublayer(x), norm))),
        Mistake("Pre-LN: the residual taken from the normalised x",
                "Pre-LN adds the sublayer's output to the original x: x + sublayer(LayerNorm(x))",
                _residual_variant(pre=lambda x, sublayer, norm: _ln(x, norm) + sublayer(_ln(x, norm)))),
        Mistake("residual add forgotten",
                "add the sublayer's input back: x + ... (that is the residual connection)",
                _residual_variant(post=lambda x, sublayer, norm: _ln(sublayer(x), norm),
                                  pre=lambda x, sublayer, norm: sublayer(_ln(x, norm)))),
    ],
))
