"""The checks of notebooks 03 and 04 cannot be fooled (issue 15).

Embed, the sinusoidal encoding, adding it, RoPE, and the three masks. Every
answer here is written the way a learner writes it in a notebook cell:
  - answers that change their input in place fail, and the classic ones are named;
  - answers that drop the gradient (NumPy, torch.tensor(values), .detach()) fail;
  - answers that break only on an edge case (L = 1, B = 1, max_len = 1, 4-D) fail;
  - a library's convention (GPT-NeoX RoPE, fairseq's encoding, PyTorch's and Hugging
    Face's masks) is named as such, with how it differs;
  - correct but unusual answers pass: loops, einsum, torch.where, float64 inside,
    a non-contiguous result, another formula;
  - a failure is a few short lines, never a dumped tensor.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tfmlib.exercises import REGISTRY, check

from random_cases import random_cases

OURS = ["embed", "sinusoidal_positional_encoding", "add_positional_encoding", "apply_rope",
        "padding_mask", "causal_mask", "target_mask"]


def assert_passes(name, fn, cases=None):
    result = check(name, fn, cases)
    assert result and result.status == "passed", str(result)


def assert_named(name, fn, mistake):
    result = check(name, fn)
    assert result.status == "mistake" and result.mistake == mistake, str(result)
    return result


def assert_fails(name, fn, *words):
    result = check(name, fn)
    assert not result and result.status == "failed", str(result)
    for word in words:
        assert word in str(result), str(result)
    return result


# ==== (1) side effects on the caller's data ===================================================

def embed_scaling_the_table(token_ids, table, scale=True):
    if scale:
        table *= math.sqrt(table.size(1))
    return table[token_ids]


def embed_mul_(token_ids, table, scale=True):
    d_model = table.shape[-1]
    return table.mul_(d_model ** 0.5)[token_ids] if scale else table[token_ids]


def add_pe_in_place(x, pe):
    x += pe[: x.size(1)]
    return x


def add_pe_add_(x, pe):
    return x.add_(pe[: x.shape[1]])


def add_pe_through_an_alias(x, pe):
    out = x                       # a second name, not a copy
    out += pe[: x.size(1)]
    return out


def rope_tuple_assignment_into_x(x, positions=None):
    L, D = x.shape[-2:]
    pos = torch.arange(L) if positions is None else positions
    theta = pos[:, None] * 10000 ** (-torch.arange(0, D, 2) / D)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    x[..., 0::2], x[..., 1::2] = x1 * theta.cos() - x2 * theta.sin(), x1 * theta.sin() + x2 * theta.cos()
    return x


def rope_line_by_line_into_x(x, positions=None):
    L, D = x.shape[-2:]
    pos = torch.arange(L) if positions is None else positions
    theta = pos[:, None] * 10000 ** (-torch.arange(0, D, 2) / D)
    x1, x2 = x[..., 0::2], x[..., 1::2]           # views: the first line overwrites x1
    x[..., 0::2] = x1 * theta.cos() - x2 * theta.sin()
    x[..., 1::2] = x1 * theta.sin() + x2 * theta.cos()
    return x


def padding_mask_overwriting_ids(token_ids, pad_id):
    token_ids[token_ids == pad_id] = -1
    return (token_ids != -1)[:, None, None, :]


@pytest.mark.parametrize("name, fn, mistake", [
    ("embed", embed_scaling_the_table, "the embedding table scaled in place"),
    ("embed", embed_mul_, "the embedding table scaled in place"),
    ("add_positional_encoding", add_pe_in_place, "x changed in place (x += pe)"),
    ("add_positional_encoding", add_pe_add_, "x changed in place (x += pe)"),
    ("add_positional_encoding", add_pe_through_an_alias, "x changed in place (x += pe)"),
    ("apply_rope", rope_tuple_assignment_into_x, "x overwritten in place"),
    ("apply_rope", rope_line_by_line_into_x, "x overwritten in place"),
], ids=lambda value: getattr(value, "__name__", None))
def test_classic_in_place_answers_are_named(name, fn, mistake):
    result = assert_named(name, fn, mistake)
    if fn is not rope_line_by_line_into_x:   # that one's values are wrong too, and shown first
        assert "in place" in result.details


def test_an_uncatalogued_in_place_answer_fails_and_says_which_input():
    assert_fails("padding_mask", padding_mask_overwriting_ids, "changed its input `token_ids` in place")


def embed_scaling_a_copy_in_place(token_ids, table, scale=True):
    vectors = table[token_ids]             # indexing with a tensor copies the rows
    if scale:
        vectors *= math.sqrt(table.size(1))
    return vectors


def add_pe_into_a_clone(x, pe):
    out = x.clone()
    out += pe[: x.size(1)]
    return out


def rope_into_empty_like(x, positions=None):
    L, D = x.shape[-2:]
    pos = torch.arange(L) if positions is None else positions
    theta = pos[:, None] * 10000 ** (-torch.arange(0, D, 2) / D)
    out = torch.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * theta.cos() - x[..., 1::2] * theta.sin()
    out[..., 1::2] = x[..., 0::2] * theta.sin() + x[..., 1::2] * theta.cos()
    return out


@pytest.mark.parametrize("name, fn", [
    ("embed", embed_scaling_a_copy_in_place),
    ("add_positional_encoding", add_pe_into_a_clone),
    ("apply_rope", rope_into_empty_like),
], ids=lambda value: getattr(value, "__name__", None))
def test_in_place_edits_of_a_new_tensor_pass(name, fn):
    assert_passes(name, fn)


# ==== gradients: the outputs of embed, add_positional_encoding and apply_rope feed training ====

def embed_rebuilt_from_values(token_ids, table, scale=True):
    vectors = torch.tensor(table[token_ids].tolist())
    return vectors * math.sqrt(table.size(1)) if scale else vectors


def embed_detached(token_ids, table, scale=True):
    vectors = table.detach()[token_ids]
    return vectors * math.sqrt(table.size(1)) if scale else vectors


def embed_in_numpy(token_ids, table, scale=True):
    vectors = torch.from_numpy(table.detach().numpy()[token_ids.numpy()])
    return vectors * math.sqrt(table.size(1)) if scale else vectors


def add_pe_rebuilt_from_values(x, pe):
    return torch.tensor((x + pe[: x.size(1)]).tolist())


def rope_detached(x, positions=None):
    L, D = x.shape[-2:]
    pos = torch.arange(L) if positions is None else positions
    theta = (pos[:, None] * 10000 ** (-torch.arange(0, D, 2) / D)).repeat_interleave(2, dim=-1)
    x = x.detach()
    rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * theta.cos() + rotated * theta.sin()


@pytest.mark.parametrize("name, fn", [
    ("embed", embed_rebuilt_from_values), ("embed", embed_detached), ("embed", embed_in_numpy),
    ("add_positional_encoding", add_pe_rebuilt_from_values), ("apply_rope", rope_detached),
], ids=lambda value: getattr(value, "__name__", None))
def test_an_output_cut_off_from_autograd_fails(name, fn):
    assert_fails(name, fn, "no gradient flows back through your output")


def add_pe_detached(x, pe):
    return x + pe[: x.size(1)].detach()    # a learned pe would never train


def test_a_gradient_cut_off_from_one_input_names_that_input():
    result = assert_fails("add_positional_encoding", add_pe_detached, "the gradient reaching `pe`")
    assert "autograd cannot follow it back to `pe`" in result.details


# ==== (2) edge cases the checks try: L = 1, B = 1, max_len = 1, 2-D and 4-D inputs ==============

def embed_squeezed(token_ids, table, scale=True):
    vectors = table[token_ids].squeeze()
    return vectors * math.sqrt(table.size(1)) if scale else vectors


def pe_squeezed(max_len, d_model):
    pos = torch.arange(max_len)[:, None]
    angle = pos * 10000 ** (-torch.arange(0, d_model, 2) / d_model)
    return torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(1).squeeze()


def rope_leading_axes_lost(x, positions=None):
    L, D = x.shape[-2:]
    pos = torch.arange(L) if positions is None else positions
    theta = pos[:, None] * 10000 ** (-torch.arange(0, D, 2) / D)
    pairs = x.reshape(-1, L, D // 2, 2)                   # (N, L, D/2, 2): one batch axis for all
    a, b = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack((a * theta.cos() - b * theta.sin(), a * theta.sin() + b * theta.cos()), -1)
    return rotated.reshape(-1, L, D)                      # right for (B, L, D) only


def padding_mask_squeezed(token_ids, pad_id):
    return (token_ids != pad_id).squeeze()[:, None, None, :]


@pytest.mark.parametrize("name, fn, words", [
    ("embed", embed_squeezed, ("odd d_model, L = 1", "shape (3, 9)")),
    ("sinusoidal_positional_encoding", pe_squeezed, ("max_len=1", "shape (6,)")),
    ("apply_rope", rope_leading_axes_lost, ("(L, D)", "shape (1, 5, 4), expected (5, 4)")),
    ("padding_mask", padding_mask_squeezed, ("one sentence",)),
], ids=lambda value: getattr(value, "__name__", None))
def test_an_answer_that_breaks_on_an_edge_case_fails_there(name, fn, words):
    assert_fails(name, fn, *words)


def test_a_correct_answer_passes_the_random_cases_too():
    for name, fn in CORRECT:
        assert_passes(name, fn, random_cases(name, 0) + random_cases(name, 1))


@pytest.mark.parametrize("name", OURS)
def test_random_cases_stay_within_the_contract(name):
    exercise = REGISTRY[name]
    for seed in range(3):
        cases = random_cases(name, seed)
        assert 5 <= len(cases) <= 30
        for case in cases:
            exercise.reference(*case.args, **case.kwargs)   # the reference accepts every one
    assert [c.label for c in random_cases(name, 5)] == [c.label for c in random_cases(name, 5)]


# ==== (3, 5) the learner's exact mistake is named; a library's convention is named as such ======

def rope_hugging_face(x, positions=None):      # transformers' rotate_half and cat((freqs, freqs))
    L, D = x.shape[-2:]
    pos = torch.arange(L) if positions is None else positions
    inv_freq = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D))
    freqs = torch.outer(pos.float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)  # cos and sin taken in float32, then cast, as transformers does
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * emb.cos().to(x.dtype) + torch.cat((-x2, x1), dim=-1) * emb.sin().to(x.dtype)


def rope_ignoring_positions(x, positions=None):
    L, D = x.shape[-2:]
    theta = (torch.arange(L)[:, None] * 10000 ** (-torch.arange(0, D, 2) / D)).to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * theta.cos() - b * theta.sin(), a * theta.sin() + b * theta.cos()), -1).flatten(-2)


def pe_fairseq(max_len, d_model):              # fairseq's SinusoidalPositionalEmbedding.get_embedding
    half_dim = d_model // 2
    emb = math.log(10000) / (half_dim - 1)
    emb = torch.exp(torch.arange(half_dim, dtype=torch.float) * -emb)
    emb = torch.arange(max_len, dtype=torch.float).unsqueeze(1) * emb.unsqueeze(0)
    return torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(max_len, -1)


def pe_tensor2tensor(max_len, d_model):        # tensor2tensor's get_timing_signal_1d, without the batch axis
    position = torch.arange(max_len, dtype=torch.float32)
    num_timescales = d_model // 2
    log_timescale_increment = math.log(10000.0) / max(num_timescales - 1, 1)
    inv_timescales = torch.exp(torch.arange(num_timescales, dtype=torch.float32) * -log_timescale_increment)
    scaled_time = position[:, None] * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


def pe_halves(max_len, d_model):
    angle = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    return torch.cat([angle.sin(), angle.cos()], dim=-1)


def padding_key_padding_mask(token_ids, pad_id):   # nn.MultiheadAttention's key_padding_mask
    return token_ids == pad_id


def padding_hugging_face(token_ids, pad_id):       # a tokenizer's attention_mask
    return (token_ids != pad_id).long()


def causal_nn_transformer(seq_len):
    return torch.nn.Transformer.generate_square_subsequent_mask(seq_len)


def causal_nn_transformer_reshaped(seq_len):
    return torch.nn.Transformer.generate_square_subsequent_mask(seq_len).unsqueeze(0).unsqueeze(0)


def target_pytorch_convention(token_ids, pad_id):  # True = blocked: what nn.MultiheadAttention takes
    L = token_ids.size(1)
    key_padding = (token_ids == pad_id)[:, None, None, :]
    future = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
    return key_padding | future


CONVENTIONS = [
    ("apply_rope", rope_hugging_face, "halves rotated instead of interleaved pairs", "GPT-NeoX / Hugging Face"),
    ("sinusoidal_positional_encoding", pe_fairseq, "the fairseq / tensor2tensor encoding instead of the paper's",
     "all sines, then all cosines"),
    ("sinusoidal_positional_encoding", pe_tensor2tensor,
     "the fairseq / tensor2tensor encoding instead of the paper's", "D/2 - 1"),
    ("sinusoidal_positional_encoding", pe_halves, "sin and cos in two halves instead of interleaved", "fairseq"),
    ("padding_mask", padding_key_padding_mask, "PyTorch's key_padding_mask instead of this course's mask",
     "True on padding"),
    ("padding_mask", padding_hugging_face, "Hugging Face's attention_mask instead of this course's mask",
     "1s and 0s"),
    ("causal_mask", causal_nn_transformer, "nn.Transformer's float mask instead of a bool one", "-inf"),
    ("causal_mask", causal_nn_transformer_reshaped, "nn.Transformer's float mask instead of a bool one",
     "ADDED to the scores"),
    ("target_mask", target_pytorch_convention, "polarity inverted", "nn.MultiheadAttention"),
    ("embed", lambda token_ids, table, scale=True: F.embedding(token_ids, table), "no scaling", "GPT-2"),
]


@pytest.mark.parametrize("name, fn, mistake, how", CONVENTIONS,
                         ids=[f"{c[0]}-{getattr(c[1], '__name__', 'lambda')}" for c in CONVENTIONS])
def test_a_librarys_convention_is_named_with_how_it_differs(name, fn, mistake, how):
    result = assert_named(name, fn, mistake)
    assert how in result.details


def test_positions_ignored_is_named():
    assert_named("apply_rope", rope_ignoring_positions, "positions argument ignored")


@pytest.mark.parametrize("name", OURS)
def test_hints_are_one_line_and_names_distinct(name):
    mistakes = REGISTRY[name].mistakes
    assert len({m.name for m in mistakes}) == len(mistakes)
    for mistake in mistakes:
        assert "\n" not in mistake.hint and len(mistake.hint) < 220, mistake.name


# ==== (4) tolerances, and correct answers written differently: all pass ========================

def embed_float64_inside(token_ids, table, scale=True):
    vectors = table.double()[token_ids]
    return (vectors * math.sqrt(table.size(1)) if scale else vectors).to(table.dtype)


def embed_einsum_one_hot(token_ids, table, scale=True):
    one_hot = F.one_hot(token_ids, table.size(0)).to(table.dtype)
    return torch.einsum("blv,vd->bld", one_hot, table) * (table.size(1) ** 0.5 if scale else 1.0)


def embed_loops(token_ids, table, scale=True):
    factor = math.sqrt(table.size(1)) if scale else 1.0
    return torch.stack([torch.stack([table[i] * factor for i in row]) for row in token_ids])


def embed_non_contiguous(token_ids, table, scale=True):
    vectors = table.T[:, token_ids].permute(1, 2, 0)      # (B, L, D), not contiguous
    return torch.where(torch.tensor(scale), vectors * math.sqrt(table.size(1)), vectors)


def pe_numpy_float64(max_len, d_model):
    pos = np.arange(max_len)[:, None]
    angle = pos / np.power(10000.0, np.arange(0, d_model, 2) / d_model)
    pe = np.zeros((max_len, d_model))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angle), np.cos(angle)
    return torch.from_numpy(pe).float()


def pe_where_on_parity(max_len, d_model):
    column = torch.arange(d_model)
    angle = torch.arange(max_len, dtype=torch.float64)[:, None] / 10000 ** ((column - column % 2) / d_model)
    return torch.where(column % 2 == 0, angle.sin(), angle.cos()).float()


def pe_complex_transposed(max_len, d_model):
    freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    z = torch.exp(1j * freq[:, None] * torch.arange(max_len, dtype=torch.float64))   # (D/2, L)
    pe_t = torch.stack((z.imag, z.real), dim=1).reshape(d_model, max_len)
    return pe_t.float().T                                   # (L, D), not contiguous


def add_pe_float64_inside(x, pe):
    return (x.double() + pe[: x.size(1)].double()).to(x.dtype)


def add_pe_loop_over_batch(x, pe):
    return torch.stack([sentence + pe[: len(sentence)] for sentence in x])


def add_pe_non_contiguous(x, pe):
    return (x.transpose(0, 1) + pe[: x.size(1), None, :]).transpose(0, 1)


def rope_rotation_matrices(x, positions=None):
    L, D = x.shape[-2:]
    pos = torch.arange(L) if positions is None else positions
    theta = pos[:, None].double() * 10000.0 ** (-torch.arange(0, D, 2).double() / D)      # (L, D/2)
    c, s = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    rotation = torch.stack((torch.stack((c, -s), -1), torch.stack((s, c), -1)), -2)       # (L, D/2, 2, 2)
    pairs = x.reshape(*x.shape[:-1], D // 2, 2)
    return torch.einsum("lpij,...lpj->...lpi", rotation, pairs).reshape(x.shape)


def rope_where_and_roll(x, positions=None):
    L, D = x.shape[-2:]
    pos = torch.arange(L) if positions is None else positions
    column = torch.arange(D)
    theta = pos[:, None] * 10000 ** (-(column - column % 2) / D)  # float32: in float16, 10001 would be 10000
    rotated = torch.where(column % 2 == 0, -x.roll(-1, dims=-1), x.roll(1, dims=-1))
    return x * theta.cos().to(x.dtype) + rotated * theta.sin().to(x.dtype)


def rope_float64_inside(x, positions=None):
    L, D = x.shape[-2:]
    pos = (torch.arange(L) if positions is None else positions).double()
    theta = (pos[:, None] / 10000 ** (torch.arange(0, D, 2).double() / D)).repeat_interleave(2, -1)
    x64 = x.double()
    rotated = torch.stack((-x64[..., 1::2], x64[..., 0::2]), dim=-1).flatten(-2)
    return (x64 * theta.cos() + rotated * theta.sin()).to(x.dtype)


def padding_loops(token_ids, pad_id):
    rows = [[[[int(t) != pad_id for t in row]]] for row in token_ids]
    return torch.tensor(rows, dtype=torch.bool)


def padding_non_contiguous(token_ids, pad_id):
    return token_ids.T.ne(pad_id).T[:, None, None, :]


def causal_loops(seq_len):
    return torch.tensor([[[[k <= q for k in range(seq_len)] for q in range(seq_len)]]])


def causal_transposed_triu(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).triu().T[None, None]   # not contiguous


def target_where(token_ids, pad_id):
    position = torch.arange(token_ids.size(1))
    return torch.where(token_ids[:, None, None, :] == pad_id, False, position[None, :] <= position[:, None])


def target_loops(token_ids, pad_id):
    L = token_ids.size(1)
    return torch.tensor([[[[bool(row[k] != pad_id) and k <= q for k in range(L)] for q in range(L)]]
                         for row in token_ids])


CORRECT = [
    ("embed", embed_float64_inside), ("embed", embed_einsum_one_hot), ("embed", embed_loops),
    ("embed", embed_non_contiguous), ("embed", embed_scaling_a_copy_in_place),
    ("sinusoidal_positional_encoding", pe_numpy_float64), ("sinusoidal_positional_encoding", pe_where_on_parity),
    ("sinusoidal_positional_encoding", pe_complex_transposed),
    ("add_positional_encoding", add_pe_float64_inside), ("add_positional_encoding", add_pe_loop_over_batch),
    ("add_positional_encoding", add_pe_non_contiguous), ("add_positional_encoding", add_pe_into_a_clone),
    ("apply_rope", rope_rotation_matrices), ("apply_rope", rope_where_and_roll),
    ("apply_rope", rope_float64_inside), ("apply_rope", rope_into_empty_like),
    ("padding_mask", padding_loops), ("padding_mask", padding_non_contiguous),
    ("causal_mask", causal_loops), ("causal_mask", causal_transposed_triu),
    ("target_mask", target_where), ("target_mask", target_loops),
]


@pytest.mark.parametrize("name, fn", CORRECT, ids=[fn.__name__ for _, fn in CORRECT])
def test_a_correct_but_unusual_answer_passes(name, fn):
    assert_passes(name, fn)


# ==== (6) a failure is readable: a few short lines, shapes rather than tensors =================

def rope_wrong_base(x, positions=None):
    L, D = x.shape[-2:]
    pos = torch.arange(L) if positions is None else positions
    theta = (pos[:, None] * 100 ** (-torch.arange(0, D, 2) / D)).repeat_interleave(2, -1)
    return x * theta.cos() + torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2) * theta.sin()


@pytest.mark.parametrize("name, fn", [
    ("embed", lambda token_ids, table, scale=True: table[token_ids] * 2.0),
    ("sinusoidal_positional_encoding", lambda max_len, d_model: torch.ones(max_len, d_model)),
    ("add_positional_encoding", lambda x, pe: x - pe[: x.size(1)]),
    ("apply_rope", rope_wrong_base),
    ("padding_mask", lambda token_ids, pad_id: (token_ids > pad_id)[:, None, None, :]),
    ("causal_mask", lambda seq_len: torch.ones(1, 1, seq_len, seq_len, dtype=torch.bool)),
    ("target_mask", lambda token_ids, pad_id: (token_ids != pad_id)[:, None, :, None]
     & torch.ones(token_ids.size(1), token_ids.size(1), dtype=torch.bool).tril()),
], ids=lambda value: value if isinstance(value, str) else None)
def test_a_failure_is_a_few_short_lines(name, fn):
    result = check(name, fn)
    text = str(result)
    assert not result and "tensor(" not in text and "[[" not in text, text
    assert len(text.splitlines()) <= 5 and all(len(line) < 240 for line in text.splitlines()), text


def test_a_hard_coded_length_is_not_named_after_a_different_crash():
    def target_mask_for_length_8(tgt, pad_id):
        causal = torch.ones(8, 8, dtype=torch.bool).tril()[None, None]
        return (tgt != pad_id)[:, None, None, :] & causal   # a shape mismatch unless L = 8
    result = check("target_mask", target_mask_for_length_8)
    assert not result and result.mistake is None, str(result)
    assert "must match" in result.details
