"""Exercises of notebook 07: FFN, dropout, LayerNorm and the residual sublayer.

How each check calls the learner's function:
    feed_forward(x, params)                            -> (B, L, D); ReLU between the layers
    dropout(x, p, training)                            -> same shape as x (judged by behaviour)
    layer_norm(x, gamma, beta, eps)                    -> same shape as x
    residual_sublayer(x, sublayer, norm, norm_first=...)  -> (B, L, D)

Dropout is random, so its check never compares numbers with the reference: it turns
the output into facts that any correct implementation shares, whatever random numbers
it draws (every entry is 0 or x / (1 - p); about a fraction p is zeroed, with a fresh
draw per entry; training=False and p = 0 give x back; the gradient reaching x is the
output divided by x).
"""
from __future__ import annotations

import dataclasses
import functools

import torch
import torch.nn.functional as F

from ..multihead import init_mha_params, multi_head_attention
from ..sublayers import dropout, feed_forward, layer_norm, residual_sublayer
from .core import Case, Contract, Exercise, Mistake, register
from .multihead import _linear_untransposed


def random_ffn_params(d_model: int, d_ff: int, g: torch.Generator) -> dict:
    return {"w_1": torch.randn(d_ff, d_model, generator=g) / d_model ** 0.5,
            "b_1": 0.3 * torch.randn(d_ff, generator=g),
            "w_2": torch.randn(d_model, d_ff, generator=g) / d_ff ** 0.5,
            "b_2": 0.3 * torch.randn(d_model, generator=g)}


def random_norm_params(d_model: int, g: torch.Generator) -> dict:
    """gamma and beta far from 1 and 0, and different per feature, so that each one shows."""
    return {"gamma": 1.0 + 0.5 * torch.randn(d_model, generator=g), "beta": 0.5 * torch.randn(d_model, generator=g)}


def _as(dtype: torch.dtype, params: dict) -> dict:
    return {key: value.to(dtype) for key, value in params.items()}


# ---- feed_forward -----------------------------------------------------------------------------

def _ffn_cases() -> list[Case]:
    g = torch.Generator().manual_seed(70)
    return [Case("(2, 5, 6), d_ff = 10", (torch.randn(2, 5, 6, generator=g), random_ffn_params(6, 10, g))),
            Case("(3, 1, 4), d_ff = 7", (torch.randn(3, 1, 4, generator=g), random_ffn_params(4, 7, g))),
            Case("(1, 4, 8), d_ff = d_model = 8", (torch.randn(1, 4, 8, generator=g),
                                                  random_ffn_params(8, 8, g))),
            _ffn_past_float16_case(g)]


def _ffn_past_float16_case(g) -> Case:
    """float16 hidden units at its edge: h + |h| overflows at 40000, h * (h > 0) is NaN at -inf."""
    params = random_ffn_params(4, 6, g)
    params["w_1"][:2] = torch.tensor([[400.0, 0, 0, 0], [-1000.0, 0, 0, 0]])  # x[..., 0] = 100: 40000 and -100000
    params["w_2"] /= 100
    x = torch.tensor([[[100.0, 1.0, -1.0, 2.0], [3.0, -2.0, 1.0, 0.5]]])
    return Case("float16, hidden units at 40000 and -inf (past -65504)", (x.half(), _as(torch.float16, params)))


def _ffn_variant(project=None, activation=F.relu, relu_at_end=False, biases=True):
    project = project or (lambda x, w, b: x @ w.T + b if biases else x @ w.T)

    def variant(x, params, activation_name="relu"):
        hidden = activation(project(x, params["w_1"], params["b_1"]))
        out = project(hidden, params["w_2"], params["b_2"])
        return F.relu(out) if relu_at_end else out
    return variant


register(Exercise(
    name="feed_forward",
    contract=Contract(axes={"B": {"x": (0,)}, "L": {"x": (1,)},
                                     "D": {"x": (-1,), "params": (0, -1)}}, wide=("D",)),
    reference=feed_forward,
    make_cases=_ffn_cases,
    gradients=True,
    mistakes=[
        Mistake("no activation between the two layers",
                "apply ReLU to the hidden (B, L, d_ff) layer: without it the two layers are one linear map",
                _ffn_variant(activation=lambda h: h)),
        Mistake("GELU instead of ReLU",
                "GELU is BERT's and GPT's activation; this FFN is the 2017 paper's, with ReLU: "
                "F.relu(hidden) or hidden.clamp(min=0)",
                _ffn_variant(activation=F.gelu),
                also=(_ffn_variant(activation=lambda h: F.gelu(h, approximate="tanh")),)),
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

# Each count judged below leaves its range with probability under 1e-8; a check judges fewer
# than 100 counts, so a correct answer fails with probability under 1e-6.
_TAIL, _CALLS = 5e-9, 300


@functools.lru_cache(maxsize=None)
def _binomial_range(n: int, p: float) -> tuple[int, int]:
    """The counts of Binomial(n, p) that leave out under _TAIL on each side."""
    pmf = torch.distributions.Binomial(n, torch.tensor(p, dtype=torch.float64)).log_prob(
        torch.arange(n + 1, dtype=torch.float64)).exp()
    cdf = pmf.cumsum(0)
    return int((cdf < _TAIL).sum()), n - int((pmf.flip(0).cumsum(0) < _TAIL).sum())


def _away_from_zero(shape, g: torch.Generator) -> torch.Tensor:
    """Entries in +-[0.5, 1.5): a zero in the output can only mean "dropped"."""
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)
    return sign * (0.5 + torch.rand(shape, generator=g))


def _dropout_cases() -> list[Case]:
    g = torch.Generator().manual_seed(71)
    return [Case("training, p = 0.3, x (5, 37, 41)", (_away_from_zero((5, 37, 41), g), 0.3, True)),
            Case("training, p = 0.1, x (4, 31, 53)", (_away_from_zero((4, 31, 53), g), 0.1, True)),
            Case("training=False (evaluation), p = 0.3", (_away_from_zero((5, 37, 41), g), 0.3, False)),
            Case("training, p = 0: nothing to drop", (_away_from_zero((3, 7, 11), g), 0.0, True)),
            Case("training, p = 0.5, 4-D like attention weights (2, 4, 30, 30)",
                 (_away_from_zero((2, 4, 30, 30), g), 0.5, True)),
            Case("training, p = 0.2, float16 x (3, 29, 71): the output keeps x's dtype",
                 (_away_from_zero((3, 29, 71), g).half(), 0.2, True))]


def _fraction_zeroed(dropped: torch.Tensor, p: float) -> str:
    count, n = int(dropped.sum()), dropped.numel()
    if count in (0, n):
        return "none" if count == 0 else "all"
    for label, q in (("about p", p), ("about 1 - p", 1 - p)):
        low, high = _binomial_range(n, q)
        if low <= count <= high:
            return label
    return "neither p nor 1 - p"


def _drops_over_calls(fn, x: torch.Tensor, p: float, training: bool) -> str:
    """The law of the drops, over _CALLS calls on two entries of x: each entry dropped a
    Binomial(_CALLS, p) number of times, both together Binomial(_CALLS, p * p) (independent
    draws). A dropout that drops exactly round(p * n) entries of each call fails it."""
    if not training or not 0 < p < 1 or x.numel() < 2:
        return "n/a"
    pair = x.reshape(-1)[:2].reshape(*[1] * (x.dim() - 1), 2)  # x's number of axes
    drops = torch.stack([fn(pair.clone(), p, training).detach().reshape(2) == 0 for _ in range(_CALLS)])
    law = all(low <= int(count.sum()) <= high for count, (low, high) in (
        (drops[:, 0], _binomial_range(_CALLS, p)), (drops[:, 1], _binomial_range(_CALLS, p)),
        (drops.all(1), _binomial_range(_CALLS, p * p))))
    return "as independent draws with probability p" if law else \
        f"not as independent draws with probability p (the drops of two entries over {_CALLS} calls)"


_SMALL_P, _SMALL_P_SIZE = 0.000123, 500_000


def _drops_at_a_small_p(fn, x: torch.Tensor, training: bool) -> str:
    """For a float16 or bfloat16 x: the share of 500,000 such entries dropped at p = 0.000123,
    about 62. torch.rand in these dtypes rounds its uniforms and falls under that p about 3 and
    17 times too often (torch.rand_like(x)); a per-mille grid, randint(0, 1000) < 1000 p, drops 500."""
    if not training or x.dtype not in (torch.float16, torch.bfloat16):
        return "n/a"
    ones = torch.ones(*[1] * (x.dim() - 1), _SMALL_P_SIZE, dtype=x.dtype)
    y = fn(ones, _SMALL_P, training)
    if not isinstance(y, torch.Tensor) or y.shape != ones.shape:
        return "not a tensor of x's shape"
    return _fraction_zeroed(y.detach() == 0, _SMALL_P)


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


def _gradient_reaching_x(fn, x: torch.Tensor, p: float, training: bool) -> str:
    """How the gradient flows back to x, seen on a second call with a tracked copy of x.

    Dropout is x * mask / (1 - p), linear in x: the gradient of output.sum() is the
    output divided by x, whatever mask this call draws.
    """
    cut_off = "none flows back (look for .detach(), .data, NumPy or torch.tensor(...))"
    leaf = x.clone().requires_grad_(True)
    y = fn(leaf.clone(), p, training)
    if not isinstance(y, torch.Tensor) or not y.requires_grad or y.shape != x.shape:
        return cut_off
    (grad,) = torch.autograd.grad(y.sum(), leaf, allow_unused=True)
    if grad is None:
        return cut_off
    as_expected = torch.allclose(grad, y.detach().to(x.dtype) / x, rtol=1e-4, atol=1e-6)
    return "output / x, as through the mask" if as_expected else "not output / x"


_LIKE_X = "a tensor of x's shape and dtype"


def _what_it_returns(x: torch.Tensor, y) -> str:
    if not isinstance(y, torch.Tensor):
        return f"a {type(y).__name__}, not a tensor"
    if y.shape != x.shape:
        return f"shape {tuple(y.shape)}, not x's {tuple(x.shape)}"
    if y.dtype != x.dtype:
        return f"dtype {str(y.dtype).replace('torch.', '')}, not x's {str(x.dtype).replace('torch.', '')}"
    return _LIKE_X


def _dropout_facts(fn, case: Case):
    """Run the learner's dropout and describe its output by facts that do not depend on the RNG.

    The learner gets the engine's own copy of x, not a clone of it, so that an answer
    that overwrites x in place is seen as one; the facts compare with x as it came.
    """
    x, p, training = case.args
    original = x.clone()
    # The engine starts every run from one random state (core._call): the answer and each catalogued mistake draw the
    # same numbers, and a mistake made the same way shows the same facts whatever ran before. Unseeded, a (D,) mask at
    # p = 0.00123 dropped one entry or none by luck, and the mistake was named or not by the order of the calls.
    y = fn(x, p, training)
    if y is None:
        return None  # the engine asks whether a `return` is missing
    facts = {"what it returns": _what_it_returns(x, y)}
    keys = ("contains NaN", "returns x unchanged", "one mask repeated along an axis",
            "fraction zeroed", "kept entries scaled by", "gradient reaching x",
            "a new mask on each call", "drops over many calls", "drops at p = 0.000123 in x's dtype")
    if facts["what it returns"] != _LIKE_X:
        facts.update({key: "n/a" for key in keys})
        return facts
    y = y.detach()
    dropped = y == 0
    facts[keys[0]] = bool(torch.isnan(y).any())
    facts[keys[1]] = bool(torch.allclose(y, original, rtol=1e-6, atol=0.0))
    facts[keys[2]] = repeated = _mask_repeated(dropped)
    # a repeated mask has few independent draws: its zeroed fraction is too noisy to judge
    facts[keys[3]] = "not judged (one mask repeated)" if repeated else _fraction_zeroed(dropped, p)
    facts[keys[4]] = _kept_scale(original, y, ~dropped)
    facts[keys[5]] = _gradient_reaching_x(fn, original, p, training)
    facts[keys[6]] = _new_mask_each_call(fn, original, p, training, dropped)
    # the law of the drops is judged only for a mask that changes: one kept from an earlier call
    # would pass it or not by the luck of that call (and it fails the fact above already)
    facts[keys[7]] = "n/a (the same mask)" if facts[keys[6]] is False else \
        _drops_over_calls(fn, original, p, training)
    facts[keys[8]] = _drops_at_a_small_p(fn, original, training)
    return facts


def _new_mask_each_call(fn, x: torch.Tensor, p: float, training: bool, dropped: torch.Tensor):
    """Whether a second call drops other entries: a dropout that reseeds the generator
    (torch.manual_seed inside) drops the same ones every time, in every layer and step."""
    if not dropped.any():
        return "n/a (nothing dropped)"
    again = fn(x.clone(), p, training)
    return isinstance(again, torch.Tensor) and again.shape == x.shape \
        and not torch.equal(again.detach() == 0, dropped)


def _uniforms(shape, x: torch.Tensor, in_x_dtype: bool) -> torch.Tensor:
    """torch.rand(shape), or drawn in x's dtype as torch.rand_like(x) does (float16 and bfloat16
    round the draws: every mistake is also named when made with rand_like)."""
    return torch.rand(shape, dtype=x.dtype if in_x_dtype else torch.float32)


def _dropout_variant(scale=lambda p: 1 / (1 - p), ignore_training=False, flipped=False,
                     mask_shape=lambda x: x.shape):
    def variant(x, p, training=True, in_x_dtype=False):
        if (not training and not ignore_training) or p == 0.0:
            return x
        draw = _uniforms(mask_shape(x), x, in_x_dtype)
        keep = draw < p if flipped else draw >= p
        return x * keep * scale(p)
    return variant


def _reseeding_dropout(x, p, training=True, in_x_dtype=False):
    if not training or p == 0.0:
        return x
    torch.manual_seed(0)
    return x * (_uniforms(x.shape, x, in_x_dtype) >= p) / (1 - p)


_MASKS: dict = {}  # the one mask per shape of _dropout_mask_kept_per_shape, drawn for the p of its first call


def _dropout_mask_kept_per_shape(x, p, training=True, in_x_dtype=False):
    if not training or p == 0.0:
        return x
    return x * _MASKS.setdefault((x.shape, in_x_dtype), _uniforms(x.shape, x, in_x_dtype) >= p) / (1 - p)


def _dropout_by_p(x, p, training=True, in_x_dtype=False):
    if not training:
        return x
    keep = _uniforms(x.shape, x, in_x_dtype) >= p
    return x * keep / p


def _dropout_scaled_at_evaluation(x, p, training=True, in_x_dtype=False):
    """The 2014 dropout paper: survivors kept as they are, every weight times 1 - p at test time."""
    if not training:
        return x * (1 - p)
    return x * (_uniforms(x.shape, x, in_x_dtype) >= p)


def _dropout_in_place(x, p, training=True, in_x_dtype=False):
    if not training or p == 0.0:
        return x
    keep = _uniforms(x.shape, x, in_x_dtype) >= p
    return x.mul_(keep).div_(1 - p)


def _also_drawn_in_xs_dtype(mistake: Mistake) -> Mistake:
    """The mistake also in the form that draws its mask with torch.rand_like(x)."""
    return dataclasses.replace(mistake, also=mistake.also + tuple(
        functools.partial(variant, in_x_dtype=True) for variant in mistake.variants
        if not isinstance(variant, functools.partial)))


register(Exercise(
    name="dropout",
    contract=Contract(values={"p": (1.0, 0.00123)}),  # p off any grid (randint(0, 100) < 100 * p)
    reference=dropout,
    make_cases=_dropout_cases,
    run=_dropout_facts,
    float64_reference=False,  # float64 would change the random draws, not only their precision
    mistakes=[_also_drawn_in_xs_dtype(mistake) for mistake in [
        Mistake("the mask drawn in x's dtype: float16 and bfloat16 round the uniforms",
                "draw the uniforms in float32 whatever x's dtype, torch.rand(x.shape) >= p: "
                "torch.rand_like(x) on a float16 or bfloat16 x rounds them, so a small p drops too often",
                functools.partial(_dropout_variant(), in_x_dtype=True)),
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
        Mistake("one mask repeated along an axis",
                "draw one random number per entry, torch.rand(x.shape), not a mask of one axis such "
                "as (D,) or (B, L, 1) that broadcasting repeats over the others",
                _dropout_variant(mask_shape=lambda x: x.shape[-1:]),
                also=(_dropout_variant(mask_shape=lambda x: (*x.shape[:-1], 1)),)),
        Mistake("the same mask on every call (the generator reseeded inside, or a mask kept from an earlier call)",
                "draw a new mask on every call: no torch.manual_seed inside dropout (it also resets "
                "the caller's random numbers) and no mask kept from an earlier call, e.g. one per "
                "shape; otherwise every layer and every step drops the same entries",
                _reseeding_dropout, also=(_dropout_mask_kept_per_shape,)),
        Mistake("non-inverted dropout (the 2014 paper): scaled by 1 - p at evaluation",
                "the 2014 paper multiplies by 1 - p at test time; inverted dropout (nn.Dropout, this "
                "course) divides the survivors by 1 - p in training, so evaluation returns x as it is",
                _dropout_scaled_at_evaluation),
        Mistake("x overwritten in place",
                "return a new tensor, x * keep / (1 - p): x.mul_(...), x *= ... or x[drop] = 0 "
                "change the caller's activations, which autograd and the residual path still need",
                _dropout_in_place),
    ]],
))


# ---- layer_norm -------------------------------------------------------------------------------

def _norm_case(label, shape, scale, offset, eps, g, dtype=torch.float32, exact_spread=False, outlier=None):
    """x = offset + scale * noise, feature 0 at `outlier` if given; eps=None leaves eps at the function's default.

    exact_spread: every row of noise standardised, so that no row is close to constant by chance.
    """
    noise = torch.randn(*shape, generator=g)
    if exact_spread and shape[-1] > 1:
        noise = (noise - noise.mean(-1, keepdim=True)) / noise.std(-1, keepdim=True)
    x = offset + scale * noise
    if outlier is not None:
        x[..., 0] = outlier
    norm = _as(dtype, random_norm_params(shape[-1], g))
    args = (x.to(dtype), norm["gamma"], norm["beta"])
    return Case(label, args if eps is None else (*args, eps))


def _layer_norm_cases() -> list[Case]:
    g = torch.Generator().manual_seed(72)
    return [_norm_case("(2, 5, 8)", (2, 5, 8), 1.0, 0.0, 1e-5, g),
            _norm_case("(3, 4, 6), small spread: eps matters, left at its default 1e-5", (3, 4, 6),
                       0.01, 2.0, None, g),
            _norm_case("one sentence, L = D: (1, 6, 6), eps = 1e-3", (1, 6, 6), 0.1, -1.0, 1e-3, g),
            _norm_case("(2, 3, 7), eps = 0.1", (2, 3, 7), 1.0, 0.5, 0.1, g),
            _norm_case("one vector: x (9,), no batch or sequence axis", (9,), 1.0, 0.0, 1e-5, g),
            _norm_case("float16 (2, 3, 256) near 260, one feature 300 above: its square and the row's sum overflow "
                       "float16, x.var and x.mean do not", (2, 3, 256), 1, 260, 1e-5, g, torch.float16, outlier=560)]


def _layer_norm_variant(dims=-1, unbiased=False, keepdim=True, denominator=None, affine="normal", default=1e-5):
    def variant(x, gamma, beta, eps=default):
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


def _layer_norm_annotated(x, gamma, beta, eps=1e-5):
    """The Annotated Transformer's LayerNorm: a_2 * (x - mean) / (std + eps) + b_2 (its own eps is 1e-6)."""
    mean = x.mean(dim=-1, keepdim=True)
    return gamma * (x - mean) / (x.std(dim=-1, keepdim=True) + eps) + beta


def _layer_norm_in_place(x, gamma, beta, eps=1e-5):
    variance = x.var(dim=-1, keepdim=True, unbiased=False)
    x -= x.mean(dim=-1, keepdim=True)
    return x / torch.sqrt(variance + eps) * gamma + beta


register(Exercise(
    name="layer_norm",
    contract=Contract(axes={"B": {"x": (0,)}, "D": {"x": (-1,), "gamma": (0,), "beta": (0,)}},
                                   wide=("D",), never_one=("D",)),
    reference=layer_norm,
    make_cases=_layer_norm_cases,
    gradients=True,
    mistakes=[
        Mistake("unbiased variance",
                "x.var() divides by D - 1 by default (Bessel's correction); LayerNorm, like "
                "nn.LayerNorm, divides by D: x.var(dim=-1, keepdim=True, unbiased=False)",
                _layer_norm_variant(unbiased=True)),
        Mistake("variance squared",
                "the variance is already a mean of squares: divide by torch.sqrt(variance + eps), no ** 2",
                _layer_norm_variant(denominator=lambda var, eps: torch.sqrt(var ** 2 + eps))),
        Mistake("divided by the variance, not the standard deviation",
                "take the square root: (x - mean) / torch.sqrt(variance + eps)",
                _layer_norm_variant(denominator=lambda var, eps: var + eps)),
        Mistake("eps outside the square root",
                "eps goes inside the root, as in nn.LayerNorm: torch.sqrt(variance + eps), not "
                "torch.sqrt(variance) + eps; the two differ most where a token's features barely vary",
                _layer_norm_variant(denominator=lambda var, eps: torch.sqrt(var) + eps)),
        Mistake("x.std() + eps, as in The Annotated Transformer",
                "The Annotated Transformer divides by x.std(-1) + eps (D - 1, eps outside the root); "
                "nn.LayerNorm and this course divide by torch.sqrt(x.var(-1, unbiased=False) + eps)",
                _layer_norm_annotated, also=(lambda x, g, b, eps=1e-6: _layer_norm_annotated(x, g, b, eps),)),
        Mistake("eps defaults to 1e-6 (The Annotated Transformer's), not nn.LayerNorm's 1e-5",
                "the signature's default is eps=1e-5, as in nn.LayerNorm; The Annotated Transformer uses 1e-6",
                _layer_norm_variant(default=1e-6)),
        Mistake("normalised over the sequence axis (dim=1)",
                "each token is normalised over its own features: mean and variance over dim=-1",
                _layer_norm_variant(dims=1)),
        Mistake("keepdim=True forgotten",
                "keep the reduced axis, mean(dim=-1, keepdim=True) -> (B, L, 1), so it broadcasts against (B, L, D)",
                _layer_norm_variant(keepdim=False)),
        Mistake("gamma and beta swapped",
                "scale by gamma, then shift by beta: normalized * gamma + beta",
                _layer_norm_variant(affine="swapped")),
        Mistake("gamma and beta not applied",
                "after normalising, scale and shift: normalized * gamma + beta",
                _layer_norm_variant(affine="none")),
        Mistake("x changed in place (x -= mean)",
                "write x - mean, a new tensor: x -= mean overwrites the caller's x",
                _layer_norm_in_place),
    ],
))


# ---- residual_sublayer ------------------------------------------------------------------------

class _TanhFFN:
    """A small nonlinear sublayer (B, L, D) -> (B, L, D) for the cases; prints without an address.

    Its weights follow the input's dtype, so that the check's float64 reference run works.
    `scale` shrinks the update, so that x + sublayer(x) can have a small spread too.
    """

    def __init__(self, d_model: int, g: torch.Generator, scale: float = 1.0):
        self.w_1 = torch.randn(2 * d_model, d_model, generator=g) / d_model ** 0.5
        self.w_2 = scale * torch.randn(d_model, 2 * d_model, generator=g) / (2 * d_model) ** 0.5

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        return torch.tanh(h @ self.w_1.to(h.dtype).T) @ self.w_2.to(h.dtype).T

    def __repr__(self) -> str:
        return "sublayer (B, L, D) -> (B, L, D)"


class _DropoutFFN(_TanhFFN):
    """A sublayer with dropout inside, as the model's are in training: each call draws a new mask from its own
    generator, so a residual that calls it twice uses another mask than the reference's one call. The mask is drawn in
    float32 whatever h's dtype, so that the float64 reference run draws the same one."""

    def __init__(self, shape: tuple, g: torch.Generator, p: float = 0.3):
        super().__init__(shape[-1], g)
        self.shape, self.p, self.generator = shape, p, torch.Generator().manual_seed(75)

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        if h.shape != self.shape:  # its mask is drawn for the whole batch, as a model's would be
            raise ValueError(f"h: this sublayer takes the whole batch, (B, L, D) = {self.shape}, "
                             f"got shape {tuple(h.shape)}")
        keep = torch.rand(h.shape, generator=self.generator) >= self.p
        return super().__call__(h) * keep.to(h.dtype) / (1 - self.p)

    def __repr__(self) -> str:
        return "sublayer with dropout inside (B, L, D) -> (B, L, D): each call draws a new mask"


class _TokenMixing:
    """A sublayer that mixes tokens, as attention does (each position gets the mean of those up to it): a residual
    that flattens the tokens, puts L first or goes one token at a time gets another answer from it."""

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        if h.dim() != 3:
            raise ValueError(f"h: expected (B, L, D), got shape {tuple(h.shape)}")
        return h.cumsum(1) / torch.arange(1, h.size(1) + 1, dtype=h.dtype)[:, None]

    def __repr__(self) -> str:
        return "sublayer mixing tokens (B, L, D) -> (B, L, D)"


class _MaskedSelfAttention:
    """The notebook's attention sublayer, multi-head self-attention with a padding mask
    (B, 1, 1, L) made for the whole batch (lengths L, L - 1, ...): a residual that calls it one
    sentence at a time gets another answer from it, or an error."""

    def __init__(self, batch: int, length: int, d_model: int):
        self.params = init_mha_params(d_model, torch.Generator().manual_seed(74))
        self.mask = (torch.arange(length) < torch.arange(length, length - batch, -1)[:, None])[:, None, None, :]

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        return multi_head_attention(h, h, h, _as(h.dtype, self.params), 2, self.mask)[0]

    def __repr__(self) -> str:
        return "self-attention sublayer with a padding mask (B, 1, 1, L)"


def _residual_case(label, shape, norm_first, g, spread=1.5, offset=0.5, update=1.0,
                   dtype=torch.float32, dropout=False):
    """norm_first=None leaves it at the function's default (Post-LN); dropout: the sublayer has dropout inside."""
    x = offset + spread * torch.randn(*shape, generator=g)
    sublayer = _DropoutFFN(shape, g) if dropout else _TanhFFN(shape[-1], g, update)
    args = (x.to(dtype), sublayer, _as(dtype, random_norm_params(shape[-1], g)))
    return Case(label, args, {} if norm_first is None else {"norm_first": norm_first})


def _residual_cases() -> list[Case]:
    g = torch.Generator().manual_seed(73)
    cases = [_residual_case("Post-LN, (2, 5, 6)", (2, 5, 6), False, g),
             _residual_case("Pre-LN, (3, 4, 8)", (3, 4, 8), True, g),
             _residual_case("Post-LN by default (norm_first not given), (1, 7, 10)", (1, 7, 10), None, g),
             _residual_case("Pre-LN, (2, 3, 5)", (2, 3, 5), True, g),
             _residual_case("Pre-LN, x with a small spread: eps matters", (2, 4, 6), True, g,
                            spread=0.01, offset=0.0),
             _residual_case("Post-LN, small spread and a small update: eps matters", (2, 4, 6), False, g,
                            spread=0.01, offset=0.0, update=0.01)]
    dropout = [_residual_case(f"{name}, a sublayer with dropout inside: call it once{steps}", (2, 5, 6), first, g,
                              dropout=True)
               for steps in ("", " per step, two steps in a row")
               for name, first in (("Post-LN", False), ("Pre-LN", True))]
    # the last two run twice on one sublayer, as training does: a second call shifts the next step's mask
    return cases + dropout[:2] + [dataclasses.replace(case, first=case) for case in dropout[2:]]


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


def _sublayer_called_twice(in_post=True, in_pre=True, keep_first=False):
    def variant(x, sublayer, norm, norm_first=False):
        twice = in_pre if norm_first else in_post
        if twice and not keep_first:
            sublayer(_ln(x, norm) if norm_first else x)  # a first call whose output is thrown away
        out = _residual_variant()(x, sublayer, norm, norm_first)
        if twice and keep_first:
            sublayer(_ln(x, norm) if norm_first else x)  # a second call whose output is thrown away
        return out
    return variant


def _residual_in_place(x, sublayer, norm, norm_first=False):
    if norm_first:
        x += sublayer(_ln(x, norm))
        return x
    x += sublayer(x)
    return _ln(x, norm)


register(Exercise(
    name="residual_sublayer",
    contract=Contract(axes={"B": {"x": (0,)}, "L": {"x": (1,)}},
                                          values={"sublayer": (_TokenMixing(), _MaskedSelfAttention(3, 4, 8))}, base=1),
    reference=residual_sublayer,
    make_cases=_residual_cases,
    gradients=True,
    mistakes=[
        Mistake("Pre-LN and Post-LN swapped",
                "Post-LN (norm_first=False): LayerNorm(x + sublayer(x)); "
                "Pre-LN (norm_first=True): x + sublayer(LayerNorm(x))",
                _residual_variant(post=_pre_ln, pre=_post_ln)),
        Mistake("norm_first ignored: always Post-LN",
                "with norm_first=True normalise first and leave the residual path alone: x + sublayer(LayerNorm(x))",
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
        Mistake("the sublayer called twice",
                "call the sublayer once and use its output: each call of a sublayer with dropout "
                "inside draws a new mask (and each costs a whole attention or FFN)",
                _sublayer_called_twice(),
                # in one of the two norms only; or the second call's output thrown away instead
                also=tuple(_sublayer_called_twice(in_post, in_pre, keep_first) for keep_first in (False, True)
                           for in_post, in_pre in ((True, False), (False, True), (True, True))
                           if keep_first or not (in_post and in_pre))),
        Mistake("x overwritten in place (x += ...)",
                "write x + sublayer(...), a new tensor: x += ... changes the caller's x, which "
                "the residual path and autograd still need",
                _residual_in_place),
    ],
))
