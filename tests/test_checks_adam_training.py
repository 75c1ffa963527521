"""Checks of notebooks 09 and 10 (adam, sgd_step, shift_right, forward) that cannot be fooled.

Every function below is written the way a learner would write it in a notebook cell. Wrong
answers must FAIL, named after the classic mistake they make where one fits; correct
answers written unusually (another state layout, float64 inside, a loop, a non-contiguous
result) must PASS. Grouped by the classes of issue 15: side effects on the caller's data,
cases the checks never tried, mistakes named right, tolerances, well-known conventions,
readable diagnoses.
"""
import math

import pytest
import torch

from tfmlib import decoder, embed, encoder, padding_mask, sinusoidal_positional_encoding, target_mask
from tfmlib.embeddings import add_positional_encoding
from tfmlib.exercises import REGISTRY, check
from tfmlib.training import EOS_ID, PAD_ID, attention_layers, decode_target, encode_source, forward


def _passes(name, answer):
    result = check(name, answer)
    assert result.status == "passed", str(result)


def _named(name, answer, mistake):
    result = check(name, answer)
    assert result.status == "mistake" and result.mistake == mistake, str(result)
    return result


def _fails(name, answer, *words):
    result = check(name, answer)
    assert result.status in ("failed", "mistake") and not result, str(result)
    for word in words:
        assert word in str(result), str(result)
    return result


# ---- Adam: correct answers in many layouts ----------------------------------------------------

def dict_init(params):
    return {"t": 0, "m": [torch.zeros_like(p) for p in params], "v": [torch.zeros_like(p) for p in params]}


def dict_step(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    state["t"] += 1
    b1, b2 = betas
    t = state["t"]
    with torch.no_grad():
        for i, p in enumerate(params):
            if p.grad is None:
                continue
            state["m"][i].mul_(b1).add_(p.grad, alpha=1 - b1)
            state["v"][i].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(lr * (state["m"][i] / (1 - b1 ** t)) / ((state["v"][i] / (1 - b2 ** t)).sqrt() + eps))


def lazy_init(params):
    return {"step": 0, "moments": {}}


def lazy_step(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    """Moments keyed by id(p), created on the first gradient; the update with torch.addcdiv."""
    state["step"] += 1
    b1, b2 = betas
    for p in params:
        if p.grad is None:
            continue
        m, v = state["moments"].setdefault(id(p), (torch.zeros_like(p), torch.zeros_like(p)))
        m.lerp_(p.grad, 1 - b1)
        v.mul_(b2).add_(p.grad.square(), alpha=1 - b2)
        step = torch.addcdiv(torch.zeros_like(p), m / (1 - b1 ** state["step"]),
                             (v / (1 - b2 ** state["step"])).sqrt().add(eps), value=lr)
        p.data.sub_(step)


def functional_init(params):
    return (0, tuple(torch.zeros_like(p) for p in params), tuple(torch.zeros_like(p) for p in params))


def functional_step(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    """Returns the new state (t, m, v); the moments are new tensors every step."""
    t, ms, vs = state
    t += 1
    new_ms, new_vs = [], []
    for p, m, v in zip(params, ms, vs):
        if p.grad is not None:
            m = betas[0] * m + (1 - betas[0]) * p.grad
            v = betas[1] * v + (1 - betas[1]) * p.grad * p.grad
            with torch.no_grad():
                p -= lr * m / (1 - betas[0] ** t) / (torch.sqrt(v / (1 - betas[1] ** t)) + eps)
        new_ms.append(m)
        new_vs.append(v)
    return t, new_ms, new_vs


class AdamState:
    def __init__(self, params):
        self.t = 0
        self.m = [torch.zeros(p.shape, dtype=p.dtype, device=p.device) for p in params]
        self.v = [torch.zeros(p.shape, dtype=p.dtype, device=p.device) for p in params]


def class_init(params):
    return AdamState(params)


def float64_inside_step(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    """Moments kept in float64 whatever the parameter, the update cast back to p's dtype."""
    state.t += 1
    for i, p in enumerate(params):
        if p.grad is None:
            continue
        g = p.grad.double()
        state.m[i] = betas[0] * state.m[i].double() + (1 - betas[0]) * g
        state.v[i] = betas[1] * state.v[i].double() + (1 - betas[1]) * g * g
        m_hat = state.m[i] / (1 - betas[0] ** state.t)
        v_hat = state.v[i] / (1 - betas[1] ** state.t)
        with torch.no_grad():
            p.copy_(p.double() - lr * m_hat / (v_hat.sqrt() + eps))


def where_step(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    """A loop over the elements' flat views, and torch.where for the denominator."""
    state.t += 1
    with torch.no_grad():
        for p, m, v in zip(params, state.m, state.v):
            if p.grad is None:
                continue
            flat_m, flat_v, flat_g = m.view(-1), v.view(-1), p.grad.reshape(-1)
            for k in range(flat_g.numel()):
                flat_m[k] = betas[0] * flat_m[k] + (1 - betas[0]) * flat_g[k]
                flat_v[k] = betas[1] * flat_v[k] + (1 - betas[1]) * flat_g[k] ** 2
            root = (v / (1 - betas[1] ** state.t)).sqrt()
            denominator = torch.where(root > 0, root + eps, torch.full_like(root, eps))
            p.sub_(lr / (1 - betas[0] ** state.t) * m / denominator)


@pytest.mark.parametrize("answer", [(dict_init, dict_step), (lazy_init, lazy_step),
                                    (functional_init, functional_step), (class_init, float64_inside_step),
                                    (class_init, where_step)],
                         ids=["dict", "lazy id(p) keys", "functional", "float64 inside", "loop and where"])
def test_adam_correct_answers_in_any_layout_pass(answer):
    _passes("adam", answer)


# ---- Adam: side effects on the caller's gradients ---------------------------------------------

def scratch_step(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    state["t"] += 1
    t = state["t"]
    with torch.no_grad():
        for p, m, v in zip(params, state["m"], state["v"]):
            if p.grad is None:
                continue
            g = p.grad
            v.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
            g *= 1 - betas[0]                     # p.grad itself is scaled
            m.mul_(betas[0]).add_(g)
            p.sub_(lr * (m / (1 - betas[0] ** t)) / ((v / (1 - betas[1] ** t)).sqrt() + eps))


def zero_grad_inside_step(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    dict_step(params, state, lr, betas, eps)
    for p in params:
        p.grad = None                             # "clean up" for the next backward()


def grad_mul_step(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    state["t"] += 1
    t = state["t"]
    with torch.no_grad():
        for p, m, v in zip(params, state["m"], state["v"]):
            if p.grad is None:
                continue
            m.mul_(betas[0]).add_(p.grad, alpha=1 - betas[0])
            v.mul_(betas[1]).addcmul_(p.grad, p.grad, value=1 - betas[1])
            p.grad.mul_(0)                        # reuse the gradient's memory for the update
            p.grad.add_(lr * (m / (1 - betas[0] ** t)) / ((v / (1 - betas[1] ** t)).sqrt() + eps))
            p.sub_(p.grad)


@pytest.mark.parametrize("step", [scratch_step, zero_grad_inside_step, grad_mul_step])
def test_adam_that_changes_the_callers_gradients_is_named(step):
    result = _named("adam", (dict_init, step), "p.grad changed by the step (the caller's gradients)")
    assert "parameters[" in result.details and ".grad" in result.details


def test_adam_that_writes_zeros_into_a_missing_grad_is_named_for_the_zero():
    def step(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)      # "no gradient means a zero gradient"
        dict_step(params, state, lr, betas, eps)

    _named("adam", (dict_init, step), "a missing gradient treated as zero")


def test_sgd_that_scales_the_gradient_in_place_is_named():
    def sgd(params, lr):
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.grad *= lr
                    p -= p.grad

    _named("sgd_step", sgd, "p.grad changed by the step (the caller's gradients)")


def test_sgd_correct_answers_pass():
    def sgd_copy(params, lr):
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.copy_(p - lr * p.grad)

    def sgd_float64(params, lr):
        for p in params:
            if p.grad is not None:
                p.data.copy_(p.data.double() - lr * p.grad.double())  # .data: in place, autograd not told

    # (torch.optim.SGD is right too, but it is PyTorch's own version: provenance fails it)
    for answer in (sgd_copy, sgd_float64):
        _passes("sgd_step", answer)


# ---- Adam: the cases never tried before --------------------------------------------------------

def missing_as_zero_step(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    state["t"] += 1
    t = state["t"]
    with torch.no_grad():
        for p, m, v in zip(params, state["m"], state["v"]):
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            m.mul_(betas[0]).add_(g, alpha=1 - betas[0])
            v.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
            p.sub_(lr * (m / (1 - betas[0] ** t)) / ((v / (1 - betas[1] ** t)).sqrt() + eps))


def test_adam_treating_a_missing_gradient_as_zero_is_named():
    _named("adam", (dict_init, missing_as_zero_step), "a missing gradient treated as zero")


def float32_state_init(params):
    return {"t": 0, "m": [torch.zeros(p.shape) for p in params], "v": [torch.zeros(p.shape) for p in params]}


def test_adam_state_made_with_torch_zeros_of_the_shape_is_named():
    result = _named("adam", (float32_state_init, dict_step),
                    "float32 inside a float64 step: m and v from torch.zeros(p.shape), or p.grad cast")
    assert "float64" in result.details


def test_adam_state_made_with_torch_zeros_of_the_shape_and_dtype_passes():
    def init(params):
        return {"t": 0, "m": [torch.zeros(p.shape, dtype=p.dtype) for p in params],
                "v": [torch.zeros(p.size(), dtype=p.dtype) for p in params]}

    _passes("adam", (init, dict_step))


def test_adam_crash_on_a_sometimes_missing_gradient_is_named():
    def step(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
        state["t"] += 1
        with torch.no_grad():
            for i, p in enumerate(params):
                state["m"][i] = betas[0] * state["m"][i] + (1 - betas[0]) * p.grad
                state["v"][i] = betas[1] * state["v"][i] + (1 - betas[1]) * p.grad ** 2
                p -= lr * state["m"][i] / (1 - betas[0] ** state["t"]) / (
                    (state["v"][i] / (1 - betas[1] ** state["t"])).sqrt() + eps)

    _named("adam", (dict_init, step), "crash on a parameter whose grad is None")


# ---- Adam: torch.optim.Adam's convention for t, named as such ----------------------------------

TORCH_CONVENTION = "t counted per parameter, only on its steps with a gradient (torch.optim.Adam's way)"


def torch_init(params):
    return torch.optim.Adam(params, lr=0.0)


def torch_step(params, optimizer, lr, betas=(0.9, 0.999), eps=1e-8):
    for group in optimizer.param_groups:
        group.update(lr=lr, betas=betas, eps=eps)
    optimizer.step()


def per_parameter_t_step(params, state, lr, betas=(0.9, 0.999), eps=1e-8):
    with torch.no_grad():
        for p in params:
            if p.grad is None:
                continue
            s = state.setdefault(id(p), {"t": 0, "m": torch.zeros_like(p), "v": torch.zeros_like(p)})
            s["t"] += 1
            s["m"].mul_(betas[0]).add_(p.grad, alpha=1 - betas[0])
            s["v"].mul_(betas[1]).addcmul_(p.grad, p.grad, value=1 - betas[1])
            m_hat, v_hat = s["m"] / (1 - betas[0] ** s["t"]), s["v"] / (1 - betas[1] ** s["t"])
            p.sub_(lr * m_hat / (v_hat.sqrt() + eps))


def test_adam_wrapping_torch_optim_adam_is_named_for_its_convention():
    result = _named("adam", (torch_init, torch_step), TORCH_CONVENTION)
    assert "also for a parameter that has no gradient" in result.details


def test_adam_with_a_step_count_per_parameter_is_named_for_torch_convention():
    _named("adam", (lambda params: {}, per_parameter_t_step), TORCH_CONVENTION)


# ---- shift_right ------------------------------------------------------------------------------

@pytest.mark.parametrize("answer", [
    lambda tgt: (tgt[:, :tgt.size(1) - 1], tgt[:, 1:tgt.size(1)]),
    lambda tgt: tuple(torch.stack(rows) for rows in zip(*[(row[:-1], row[1:]) for row in tgt])),
    lambda tgt: (tgt.t()[:-1].t(), tgt.t()[1:].t()),              # non-contiguous views
    lambda tgt: (tgt.roll(1, dims=1)[:, 1:], tgt.roll(-1, dims=1)[:, :-1]),
    lambda tgt: tuple(t.contiguous() for t in (tgt[:, :-1], tgt[:, 1:])),
], ids=["explicit bounds", "row loop", "transposed views", "roll", "contiguous copies"])
def test_shift_right_correct_answers_pass(answer):
    _passes("shift_right", answer)


def test_shift_right_that_squeezes_fails_on_one_sequence():
    def shift(tgt):
        return tgt[:, :-1].squeeze(), tgt[:, 1:].squeeze()   # (B, L - 1) only while B > 1

    _fails("shift_right", shift, "one sequence")


def test_shift_right_minus_100_labels_are_named_as_hugging_face_convention():
    def shift(tgt):
        labels = tgt[:, 1:].clone()
        labels[labels == PAD_ID] = -100
        return tgt[:, :-1], labels

    _named("shift_right", shift, "pad labels set to -100 (Hugging Face's ignore index)")


def test_shift_right_minus_100_written_through_a_view_is_named_for_the_view():
    def shift(tgt):
        decoder_input, labels = tgt[:, :-1], tgt[:, 1:]
        labels.masked_fill_(labels == PAD_ID, -100)
        return decoder_input, labels

    _named("shift_right", shift,
           "labels edited in place: tgt[:, 1:] is a view, so the caller's tgt changed too")


def test_shift_right_that_edits_tgt_through_a_view_fails():
    def shift(tgt):
        decoder_input = tgt[:, :-1]
        decoder_input[decoder_input == EOS_ID] = PAD_ID   # "the decoder never reads <eos>"
        return decoder_input, tgt[:, 1:]

    _fails("shift_right", shift)


def test_shift_right_with_a_start_token_prepended_is_named():
    def shift_tokens_right(tgt):                          # Hugging Face's recipe, on a tgt with <bos>
        decoder_input = torch.cat([torch.full((tgt.size(0), 1), 1), tgt[:, :-1]], dim=1)
        return decoder_input, tgt

    result = _named("shift_right", shift_tokens_right, "<bos> prepended again")
    assert "Hugging Face" in result.details


# ---- forward ----------------------------------------------------------------------------------

def forward_from_stacks(params, src, tgt_in, config, training=False):
    """Rebuilt from the stacks, following every field of the config as the two halves do."""
    options = dict(norm_first=config.norm_first, dropout_p=config.dropout_p, training=training)
    # the table in the model's dtype: a float32 table would turn a float16 model's logits float32
    pe = sinusoidal_positional_encoding(config.max_len, config.d_model, dtype=params["embedding"].dtype)

    def embedded(ids):
        x = embed(ids, params["embedding"])
        return add_positional_encoding(x, pe) if config.positional else x

    src_mask = padding_mask(src, PAD_ID)
    memory = encoder(embedded(src), attention_layers(params, "encoder", config),
                     config.num_heads, src_mask, final_norm=params["encoder_norm"], **options)
    hidden = decoder(embedded(tgt_in), memory, attention_layers(params, "decoder", config), config.num_heads,
                     target_mask(tgt_in, PAD_ID), src_mask, final_norm=params["decoder_norm"], **options)
    return torch.einsum("bld,vd->blv", hidden, params["embedding"]) + params["out_bias"]


def _to(value, dtype):
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, dict):
        return {k: _to(v, dtype) for k, v in value.items()}
    if isinstance(value, list):
        return [_to(v, dtype) for v in value]
    return value


def forward_in_float64(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(_to(params, torch.float64), src, config, training)
    logits = decode_target(_to(params, torch.float64), tgt_in, memory, src_mask, config, training)
    return logits.to(params["embedding"].dtype)   # more precise inside, the model's dtype outside


def forward_keywords(params, src, tgt_in, config, training=False):
    memory, mask = encode_source(params=params, src=src, config=config, training=training)
    logits = decode_target(params=params, tgt_in=tgt_in, memory=memory, src_mask=mask, config=config,
                           training=training)
    return logits.transpose(0, 1).contiguous().transpose(0, 1)   # non-contiguous, same values


@pytest.mark.parametrize("answer", [forward_from_stacks, forward_in_float64, forward_keywords])
def test_forward_correct_answers_pass(answer):
    _passes("forward", answer)


def test_forward_check_leaves_the_global_random_generator_as_it_was():
    torch.manual_seed(3)
    before = torch.get_rng_state()
    check("forward", forward_keywords)
    assert torch.equal(torch.get_rng_state(), before)


def encoder_without_dropout(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params, src, config)
    return decode_target(params, tgt_in, memory, src_mask, config, training)


def decoder_without_dropout(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, src_mask, config)


def memory_detached(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory.detach(), src_mask, config, training)


@torch.no_grad()
def forward_without_grad(params, src, tgt_in, config, training=False):
    memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, src_mask, config, training)


@pytest.mark.parametrize("answer, mistake", [
    (encoder_without_dropout, "training flag not passed to encode_source: no dropout in the encoder"),
    (decoder_without_dropout, "training flag not passed to decode_target: no dropout in the decoder"),
    (memory_detached, "encoder output cut off from autograd: no gradient reaches the encoder"),
    (forward_without_grad, "forward pass under torch.no_grad(): no gradient reaches any weight"),
], ids=["encoder only in eval", "decoder only in eval", "memory detached", "no_grad"])
def test_forward_classic_mistakes_are_named(answer, mistake):
    _named("forward", answer, mistake)


def test_forward_rebuilt_from_values_fails_on_its_gradients():
    def forward_as_values(params, src, tgt_in, config, training=False):
        return torch.tensor(forward(params, src, tgt_in, config, training).tolist())

    _fails("forward", forward_as_values, "gradient")


def test_forward_that_scales_the_embedding_in_place_fails_and_says_so():
    def forward_scaled(params, src, tgt_in, config, training=False):
        params["embedding"].data *= math.sqrt(config.d_model)   # changes the caller's model
        logits = forward(params, src, tgt_in, config, training)
        return logits

    _fails("forward", forward_scaled)


# ---- readable diagnoses -----------------------------------------------------------------------

@pytest.mark.parametrize("name, answer", [
    ("adam", (dict_init, lambda params, state, lr, betas=(0.9, 0.999): dict_step(params, state, 2 * lr))),
    ("forward", lambda params, src, tgt_in, config, training=False: 1.01 * forward(params, src, tgt_in,
                                                                                   config, training)),
    ("forward", memory_detached),
    ("shift_right", lambda tgt: (tgt[:, :-1], tgt[:, 1:] + 1)),
])
def test_diagnoses_are_short_and_print_no_tensor(name, answer):
    text = str(check(name, answer))
    assert "tensor(" not in text, text
    assert all(len(line) < 240 for line in text.splitlines()), text
    assert len(text.splitlines()) <= 8, text


def test_every_hint_is_one_line():
    for name in ("adam", "sgd_step", "shift_right", "forward"):
        for mistake in REGISTRY[name].mistakes:
            assert mistake.hint and "\n" not in mistake.hint


def w_sgd_replaces_list_entries(parameters, lr):
    with torch.no_grad():
        for i, p in enumerate(parameters):
            if p.grad is not None:
                parameters[i] = p - lr * p.grad   # a new tensor in the list; the model's is unchanged


def test_replacing_the_lists_entries_is_named_as_an_update_not_in_place():
    result = check("sgd_step", w_sgd_replaces_list_entries)
    assert result.mistake == "update not in place (p = p - ... rebinds a name)", str(result)
    assert "grad" not in result.message


def w_adam_v_is_m_init(parameters):
    zeros = [torch.zeros_like(p) for p in parameters]
    return {"t": 0, "m": zeros, "v": zeros}


def test_nan_parameters_do_not_look_like_changed_gradients():
    from tfmlib import adam_step
    result = check("adam", (w_adam_v_is_m_init, adam_step))
    assert result.mistake == "v = m: both names for the same tensors", str(result)
    assert "GradientChangedError" not in str(result)
