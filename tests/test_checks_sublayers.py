"""The checks of notebook 07 (feed_forward, dropout, layer_norm, residual_sublayer) cannot be fooled.

Every answer below is written the way a learner would write it in a notebook cell. By the
classes of issue 15:
  - side effects: an answer that changes the caller's data fails, and is named where the
    in-place edit is a classic one; in-place steps on the answer's own tensors pass;
  - cases the checks never tried before: B = 1, 4-D dropout, 1-D LayerNorm input, eps and
    norm_first left at their defaults, small spreads where eps matters;
  - naming: a catalogued mistake is named when the answer makes exactly it, and an answer
    with two mistakes is not named after one of them;
  - tolerances: float64 inside, other formulas, loops, einsum, non-contiguous results pass;
  - conventions named as such: The Annotated Transformer's LayerNorm, x.var()'s default,
    GELU, the 2014 paper's dropout;
  - readable diagnoses: no tensor or dict dumped, short lines;
and outputs that feed training must let the gradient through.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tfmlib import layer_norm
from tfmlib.exercises import check

# ---- side effects on the caller's data ---------------------------------------------------------


def dropout_mul_in_place(x, p, training=True):
    if not training:
        return x
    keep = torch.rand_like(x) >= p
    return x.mul_(keep).div_(1 - p)


def dropout_zero_by_index(x, p, training=True):
    if not training:
        return x
    x[torch.rand_like(x) < p] = 0
    return x / (1 - p)


def dropout_augmented(x, p, training=True):
    if training and p > 0:
        x *= (torch.rand(x.shape) >= p).float()
        x /= 1 - p
    return x


def layer_norm_sub_in_place(x, gamma, beta, eps=1e-5):
    variance = x.var(dim=-1, keepdim=True, unbiased=False)
    x -= x.mean(dim=-1, keepdim=True)
    return x / torch.sqrt(variance + eps) * gamma + beta


def layer_norm_chained_in_place(x, gamma, beta, eps=1e-5):
    mean, variance = x.mean(-1, keepdim=True), x.var(-1, keepdim=True, unbiased=False)
    x.sub_(mean).div_(torch.sqrt(variance + eps))
    return gamma * x + beta


def residual_add_in_place(x, sublayer, norm, norm_first=False):
    if norm_first:
        x += sublayer(layer_norm(x, norm["gamma"], norm["beta"]))
        return x
    x += sublayer(x)
    return layer_norm(x, norm["gamma"], norm["beta"])


IN_PLACE_NAMED = [
    ("dropout", dropout_mul_in_place, "x overwritten in place"),
    ("dropout", dropout_zero_by_index, "x overwritten in place"),
    ("dropout", dropout_augmented, "x overwritten in place"),
    ("layer_norm", layer_norm_sub_in_place, "x changed in place (x -= mean)"),
    ("layer_norm", layer_norm_chained_in_place, "x changed in place (x -= mean)"),
    ("residual_sublayer", residual_add_in_place, "x overwritten in place (x += ...)"),
]


@pytest.mark.parametrize("name, fn, mistake", IN_PLACE_NAMED, ids=[fn.__name__ for _, fn, _ in IN_PLACE_NAMED])
def test_an_answer_that_overwrites_x_fails_and_is_named(name, fn, mistake):
    result = check(name, fn)
    assert result.status == "mistake" and result.mistake == mistake, str(result)


def ffn_transposes_the_stored_weights(x, params):
    params["w_1"], params["w_2"] = params["w_1"].T, params["w_2"].T  # now (in, out)
    return F.relu(x @ params["w_1"] + params["b_1"]) @ params["w_2"] + params["b_2"]


def residual_pops_the_norm(x, sublayer, norm, norm_first=False):
    gamma, beta = norm.pop("gamma"), norm.pop("beta")
    if norm_first:
        return x + sublayer(layer_norm(x, gamma, beta))
    return layer_norm(x + sublayer(x), gamma, beta)


def residual_in_place_in_post_ln_only(x, sublayer, norm, norm_first=False):
    if norm_first:
        return x + sublayer(layer_norm(x, **norm))
    x += sublayer(x)
    return layer_norm(x, **norm)


@pytest.mark.parametrize("name, fn, argument", [
    ("feed_forward", ffn_transposes_the_stored_weights, "params"),
    ("residual_sublayer", residual_pops_the_norm, "norm"),
    ("residual_sublayer", residual_in_place_in_post_ln_only, "x"),
])
def test_an_answer_that_changes_any_input_fails_and_says_which(name, fn, argument):
    result = check(name, fn)
    assert not result
    assert f"changed its input `{argument}" in result.message, str(result)


def ffn_in_place_on_its_own_hidden(x, params):
    hidden = x @ params["w_1"].T
    hidden += params["b_1"]
    hidden.relu_()
    out = hidden @ params["w_2"].T
    out += params["b_2"]
    return out


def dropout_on_a_copy(x, p, training=True):
    if not training:
        return x
    y = x.clone()
    y[torch.rand(y.shape) < p] = 0.0
    y /= 1 - p
    return y


def layer_norm_in_place_on_its_own_tensor(x, gamma, beta, eps=1e-5):
    out = x - x.mean(dim=-1, keepdim=True)
    out /= torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=False) + eps)
    return out.mul_(gamma).add_(beta)


def residual_on_a_copy(x, sublayer, norm, norm_first=False):
    out = x.clone()
    if norm_first:
        out += sublayer(layer_norm(x, **norm))
        return out
    out += sublayer(x)
    return layer_norm(out, **norm)


@pytest.mark.parametrize("name, fn", [
    ("feed_forward", ffn_in_place_on_its_own_hidden),
    ("dropout", dropout_on_a_copy),
    ("layer_norm", layer_norm_in_place_on_its_own_tensor),
    ("residual_sublayer", residual_on_a_copy),
])
def test_in_place_steps_on_the_answers_own_tensors_pass(name, fn):
    result = check(name, fn)
    assert result.status == "passed", str(result)


# ---- cases the checks never tried before -------------------------------------------------------

def ffn_squeezes(x, params):
    h = x.squeeze()  # meant for nothing, but drops L = 1 and B = 1
    return F.relu(h @ params["w_1"].T + params["b_1"]) @ params["w_2"].T + params["b_2"]


def ffn_assumes_d_ff_is_4_d_model(x, params):
    batch, length, d_model = x.shape
    hidden = F.relu(x.reshape(-1, d_model) @ params["w_1"].T + params["b_1"])
    return (hidden.view(batch, length, 4 * d_model) @ params["w_2"].T) + params["b_2"]


def dropout_assumes_3d(x, p, training=True):
    if not training:
        return x
    batch, length, d_model = x.shape
    return x * (torch.rand(batch, length, d_model) >= p) / (1 - p)


def layer_norm_over_axis_2(x, gamma, beta, eps=1e-5):
    mean, variance = x.mean(2, keepdim=True), x.var(2, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(variance + eps) * gamma + beta


def residual_without_eps(x, sublayer, norm, norm_first=False):
    def norm_of(t):
        centred = t - t.mean(-1, keepdim=True)
        return centred / centred.pow(2).mean(-1, keepdim=True).sqrt() * norm["gamma"] + norm["beta"]
    return x + sublayer(norm_of(x)) if norm_first else norm_of(x + sublayer(x))


def residual_pre_ln_by_default(x, sublayer, norm, norm_first=True):
    if norm_first:
        return x + sublayer(layer_norm(x, **norm))
    return layer_norm(x + sublayer(x), **norm)


@pytest.mark.parametrize("name, fn, label", [
    ("feed_forward", ffn_squeezes, "(3, 1, 4)"),
    ("feed_forward", ffn_assumes_d_ff_is_4_d_model, "(2, 5, 6), d_ff = 10"),
    ("dropout", dropout_assumes_3d, "4-D like attention weights"),
    ("layer_norm", layer_norm_over_axis_2, "one vector"),
    ("residual_sublayer", residual_without_eps, "eps matters"),
    ("residual_sublayer", residual_pre_ln_by_default, "norm_first not given"),
])
def test_answers_that_only_work_on_the_usual_inputs_fail_on_the_case_that_shows_it(name, fn, label):
    result = check(name, fn)
    assert result.status == "failed", str(result)
    assert label in result.details, str(result)


# ---- a mistake is named when the answer makes exactly it --------------------------------------

def layer_norm_annotated_transformer(x, a_2, b_2, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    std = x.std(-1, keepdim=True)
    return a_2 * (x - mean) / (std + eps) + b_2


def layer_norm_var_default(x, gamma, beta, eps=1e-5):
    mean = torch.mean(x, -1, keepdim=True)
    return gamma * (x - mean) / torch.sqrt(torch.var(x, -1, keepdim=True) + eps) + beta


def layer_norm_correction_1(x, gamma, beta, eps=1e-5):
    variance, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=1)
    return (x - mean) * torch.rsqrt(variance + eps) * gamma + beta


def layer_norm_eps_after_sqrt(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    return gamma * (x - mean) / (x.var(-1, keepdim=True, unbiased=False).sqrt() + eps) + beta


def layer_norm_biased_std_plus_eps(x, gamma, beta, eps=1e-5):
    return gamma * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True, unbiased=False) + eps) + beta


def ffn_gelu(x, params):
    return F.gelu(x @ params["w_1"].T + params["b_1"]) @ params["w_2"].T + params["b_2"]


def ffn_gelu_tanh(x, params):
    return F.linear(F.gelu(F.linear(x, params["w_1"], params["b_1"]), approximate="tanh"),
                    params["w_2"], params["b_2"])


def dropout_2014_paper(x, p, training=True):
    if not training:
        return x * (1 - p)  # weights scaled down at test time
    return x * (torch.rand_like(x) >= p)


def dropout_forgets_to_rescale(x, p, training=True):
    if not training:
        return x
    return x * (torch.rand_like(x) > p)


def residual_always_post_ln(x, sublayer, norm, norm_first=False):
    return F.layer_norm(x + sublayer(x), x.shape[-1:], norm["gamma"], norm["beta"])


NAMED = [
    ("layer_norm", layer_norm_annotated_transformer, "x.std() + eps, as in The Annotated Transformer"),
    ("layer_norm", layer_norm_var_default, "unbiased variance"),
    ("layer_norm", layer_norm_correction_1, "unbiased variance"),
    ("layer_norm", layer_norm_eps_after_sqrt, "eps outside the square root"),
    ("layer_norm", layer_norm_biased_std_plus_eps, "eps outside the square root"),
    ("feed_forward", ffn_gelu, "GELU instead of ReLU"),
    ("feed_forward", ffn_gelu_tanh, "GELU instead of ReLU"),
    ("dropout", dropout_2014_paper, "non-inverted dropout (the 2014 paper): scaled by 1 - p at evaluation"),
    ("dropout", dropout_forgets_to_rescale, "survivors not rescaled"),
    ("residual_sublayer", residual_always_post_ln, "norm_first ignored: always Post-LN"),
]


@pytest.mark.parametrize("name, fn, mistake", NAMED, ids=[fn.__name__ for _, fn, _ in NAMED])
def test_a_classic_mistake_or_convention_is_named(name, fn, mistake):
    result = check(name, fn)
    assert result.status == "mistake" and result.mistake == mistake, str(result)


def test_conventions_say_how_they_differ():
    annotated = check("layer_norm", layer_norm_annotated_transformer)
    assert "D - 1" in annotated.details and "eps" in annotated.details
    paper = check("dropout", dropout_2014_paper)
    assert "1 - p at test time" in paper.details and "inverted" in paper.details
    gelu = check("feed_forward", ffn_gelu)
    assert "ReLU" in gelu.details


def layer_norm_unbiased_and_swapped(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    return beta * (x - mean) / torch.sqrt(x.var(-1, keepdim=True) + eps) + gamma


def dropout_by_p_in_place(x, p, training=True):
    if not training:
        return x
    return x.mul_(torch.rand_like(x) >= p).div_(p)


def ffn_gelu_without_biases(x, params):
    return F.gelu(x @ params["w_1"].T) @ params["w_2"].T


@pytest.mark.parametrize("name, fn", [
    ("layer_norm", layer_norm_unbiased_and_swapped),
    ("dropout", dropout_by_p_in_place),
    ("feed_forward", ffn_gelu_without_biases),
])
def test_two_mistakes_at_once_are_not_named_after_one(name, fn):
    result = check(name, fn)
    assert result.status == "failed" and result.mistake is None, str(result)


# ---- tolerances: any correct answer passes ----------------------------------------------------

def layer_norm_float64_inside(x, gamma, beta, eps=1e-5):
    x64 = x.double()
    mean = x64.mean(-1, keepdim=True)
    variance = ((x64 - mean) ** 2).mean(-1, keepdim=True)
    return ((x64 - mean) / torch.sqrt(variance + eps) * gamma.double() + beta.double()).to(x.dtype)


def layer_norm_torch_in_float64(x, gamma, beta, eps=1e-5):
    wide = x.double()  # (F.layer_norm itself is PyTorch's own version: not the learner's answer)
    variance, mean = torch.var_mean(wide, dim=-1, keepdim=True, unbiased=False)
    return ((wide - mean) / torch.sqrt(variance + eps) * gamma.double() + beta.double()).to(x.dtype)


def layer_norm_einsum(x, gamma, beta, eps=1e-5):
    wide = x.to(torch.promote_types(x.dtype, torch.float32))  # float16 sums and squares overflow past 65504
    d = x.shape[-1]
    mean = torch.einsum("...d->...", wide)[..., None] / d
    centred = wide - mean
    variance = torch.einsum("...d,...d->...", centred, centred)[..., None] / d
    normalized = torch.einsum("...d,d->...d", centred / torch.sqrt(variance + eps), gamma.to(wide.dtype))
    return (normalized + beta.to(wide.dtype)).to(x.dtype)


def layer_norm_non_contiguous(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    out = (x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * gamma + beta
    return out.mT.contiguous().mT if out.dim() >= 2 else out


def ffn_float64_inside(x, params):
    p = {k: v.double() for k, v in params.items()}
    hidden = torch.relu(x.double() @ p["w_1"].T + p["b_1"])
    return (hidden @ p["w_2"].T + p["b_2"]).to(x.dtype)


def ffn_token_by_token(x, params):
    out = torch.empty(x.shape[:-1] + (params["w_2"].shape[0],), dtype=x.dtype)
    for b in range(x.shape[0]):
        for t in range(x.shape[1]):
            hidden = torch.where(params["w_1"] @ x[b, t] + params["b_1"] > 0,
                                 params["w_1"] @ x[b, t] + params["b_1"], 0.0)
            out[b, t] = params["w_2"] @ hidden + params["b_2"]
    return out


def ffn_non_contiguous(x, params):
    out = F.linear(F.relu(F.linear(x, params["w_1"], params["b_1"])), params["w_2"], params["b_2"])
    return out.transpose(0, 1).contiguous().transpose(0, 1)


def dropout_float64_inside(x, p, training=True):
    if not training:
        return x
    keep = (torch.rand(x.shape, dtype=torch.float64) >= p).double()
    return (x.double() * keep / (1 - p)).to(x.dtype)


def dropout_bernoulli_mask(x, p, training=True):
    if not training or p == 0:
        return x
    return x * torch.empty_like(x).bernoulli_(1 - p) / (1 - p)


def residual_float64_inside(x, sublayer, norm, norm_first=False):
    x64, gamma, beta = x.double(), norm["gamma"].double(), norm["beta"].double()
    if norm_first:
        out = x64 + sublayer(layer_norm(x64, gamma, beta))
    else:
        out = layer_norm(x64 + sublayer(x64), gamma, beta)
    return out.to(x.dtype)


def residual_torch_where(x, sublayer, norm, norm_first=False):
    first = torch.tensor(bool(norm_first))
    update = sublayer(torch.where(first, F.layer_norm(x, x.shape[-1:], norm["gamma"], norm["beta"]), x))
    post = F.layer_norm(x + update, x.shape[-1:], norm["gamma"], norm["beta"])
    return torch.where(first, x + update, post)


@pytest.mark.parametrize("name, fn", [
    ("layer_norm", layer_norm_float64_inside),
    ("layer_norm", layer_norm_torch_in_float64),
    ("layer_norm", layer_norm_einsum),
    ("layer_norm", layer_norm_non_contiguous),
    ("feed_forward", ffn_float64_inside),
    ("feed_forward", ffn_token_by_token),
    ("feed_forward", ffn_non_contiguous),
    ("dropout", dropout_float64_inside),
    ("dropout", dropout_bernoulli_mask),
    ("residual_sublayer", residual_float64_inside),
    ("residual_sublayer", residual_torch_where),
], ids=lambda value: getattr(value, "__name__", value))
def test_correct_answers_written_differently_pass(name, fn):
    result = check(name, fn)
    assert result.status == "passed", str(result)


# ---- outputs that feed training let the gradient through ---------------------------------------

def ffn_detached(x, params):
    return F.linear(F.relu(F.linear(x, params["w_1"], params["b_1"])), params["w_2"], params["b_2"]).detach()


def layer_norm_rebuilt_from_values(x, gamma, beta, eps=1e-5):
    out = F.layer_norm(x, x.shape[-1:], gamma, beta, eps)
    return torch.tensor(out.tolist(), dtype=x.dtype)


def dropout_through_numpy(x, p, training=True):
    if not training:
        return x
    keep = np.random.rand(*x.shape) >= p
    return torch.from_numpy(x.detach().numpy() * keep / (1 - p)).to(x.dtype)


def residual_under_no_grad(x, sublayer, norm, norm_first=False):
    with torch.no_grad():
        if norm_first:
            return x + sublayer(layer_norm(x, **norm))
        return layer_norm(x + sublayer(x), **norm)


@pytest.mark.parametrize("name, fn", [
    ("feed_forward", ffn_detached),
    ("layer_norm", layer_norm_rebuilt_from_values),
    ("dropout", dropout_through_numpy),
    ("residual_sublayer", residual_under_no_grad),
])
def test_an_output_cut_off_from_autograd_fails(name, fn):
    result = check(name, fn)
    assert not result
    assert "gradient" in result.message + result.details, str(result)


# ---- readable diagnoses ------------------------------------------------------------------------

def dropout_returns_a_list(x, p, training=True):
    return (x * (torch.rand_like(x) >= p) / (1 - p)).tolist()


def dropout_returns_float64(x, p, training=True):
    if not training:
        return x
    return x * (torch.rand(x.shape) >= p).double() / (1 - p)


@pytest.mark.parametrize("fn, says", [(dropout_returns_a_list, "a list, not a tensor"),
                                      (dropout_returns_float64, "dtype float64, not x's float32")])
def test_a_dropout_that_returns_no_tensor_like_x_is_told_so(fn, says):
    result = check("dropout", fn)
    assert result.status == "failed" and says in result.message, str(result)
    assert "dict" not in result.message, str(result)


@pytest.mark.parametrize("name, fn", [
    ("feed_forward", ffn_squeezes),
    ("dropout", dropout_by_p_in_place),
    ("layer_norm", layer_norm_unbiased_and_swapped),
    ("residual_sublayer", residual_without_eps),
    ("residual_sublayer", residual_pops_the_norm),
    ("dropout", dropout_returns_a_list),
])
def test_diagnoses_are_short_and_dump_no_data(name, fn):
    text = str(check(name, fn))
    assert "tensor(" not in text and "[[" not in text, text
    assert "object at 0x" not in text, text
    assert all(len(line) <= 240 for line in text.splitlines()), text


def w_dropout_reseeds(x, p, training=True):
    if not training:
        return x
    torch.manual_seed(0)  # the same mask on every call, and the caller's random numbers reset
    keep = (torch.rand_like(x) >= p).to(x.dtype)
    return x * keep / (1 - p)


def test_a_dropout_that_reseeds_the_generator_is_named_and_the_notebooks_numbers_go_on():
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    result = check("dropout", w_dropout_reseeds)
    assert result.mistake.startswith("the same mask on every call"), str(result)
    assert torch.equal(torch.rand(3), expected_next)  # check() restored the global generator
