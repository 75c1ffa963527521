"""Notebook 03: ids (B, L) -> vectors (B, L, D), sinusoidal / learned positions, RoPE."""
import math

import pytest
import torch
from torch import nn

from tfmlib import (add_positional_encoding, apply_rope, embed, learned_positional_encoding,
                    rotate_half_pairs, sinusoidal_positional_encoding)

TIGHT = dict(rtol=1e-12, atol=1e-12)


# ---- embed ---------------------------------------------------------------------------------

@pytest.mark.parametrize("vocab_size, d_model, batch, length", [(7, 6, 3, 5), (11, 10, 1, 1), (5, 3, 2, 7)])
def test_embed_equals_nn_embedding_times_sqrt_d_model(vocab_size, d_model, batch, length, gen):
    table = nn.Embedding(vocab_size, d_model, dtype=torch.float64)
    ids = torch.randint(0, vocab_size, (batch, length), generator=gen)
    got = embed(ids, table.weight.detach())
    assert got.shape == (batch, length, d_model)
    torch.testing.assert_close(got, table(ids).detach() * math.sqrt(d_model), **TIGHT)


def test_embed_multiplies_not_divides_and_scale_false_is_the_plain_lookup(gen):
    table = torch.randn(9, 16, generator=gen, dtype=torch.float64)
    ids = torch.tensor([[0, 8, 3], [3, 3, 1]])
    assert torch.equal(embed(ids, table, scale=False), table[ids])
    torch.testing.assert_close(embed(ids, table), 4.0 * table[ids], **TIGHT)  # sqrt(16) = 4


def test_embed_keeps_gradient_to_the_table(gen):
    table = torch.randn(5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    embed(torch.tensor([[1, 1, 2]]), table).sum().backward()
    expected = torch.zeros(5, 4, dtype=torch.float64)
    expected[1], expected[2] = 2 * 2.0, 2.0  # row 1 used twice; each use scaled by sqrt(4) = 2
    torch.testing.assert_close(table.grad, expected, **TIGHT)


# ---- sinusoidal positional encoding --------------------------------------------------------

def closed_form_pe(max_len, d_model, base=10000.0):
    """PE[pos, 2i] = sin(pos / base^(2i/d)), PE[pos, 2i+1] = cos(pos / base^(2i/d)), with loops."""
    pe = [[0.0] * d_model for _ in range(max_len)]
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / base ** (2 * i / d_model)
            pe[pos][2 * i] = math.sin(angle)
            pe[pos][2 * i + 1] = math.cos(angle)
    return torch.tensor(pe, dtype=torch.float64)


@pytest.mark.parametrize("max_len, d_model", [(1, 2), (7, 2), (5, 6), (9, 10), (4, 16), (13, 4)])
def test_sinusoidal_pe_matches_its_closed_form_for_several_d_model(max_len, d_model):
    pe = sinusoidal_positional_encoding(max_len, d_model, dtype=torch.float64)
    assert pe.shape == (max_len, d_model)
    torch.testing.assert_close(pe, closed_form_pe(max_len, d_model), **TIGHT)


def test_sinusoidal_pe_other_base():
    pe = sinusoidal_positional_encoding(6, 8, base=100.0, dtype=torch.float64)
    torch.testing.assert_close(pe, closed_form_pe(6, 8, base=100.0), **TIGHT)


def test_sinusoidal_pe_sin_on_even_columns_cos_on_odd():
    pe = sinusoidal_positional_encoding(10, 6, dtype=torch.float64)
    position = torch.arange(10, dtype=torch.float64)
    # column pair 0 has frequency 1: sin(pos) and cos(pos)
    torch.testing.assert_close(pe[:, 0], torch.sin(position), **TIGHT)
    torch.testing.assert_close(pe[:, 1], torch.cos(position), **TIGHT)
    # position 0: sin(0) = 0 on even columns, cos(0) = 1 on odd columns
    assert pe[0].tolist() == [0.0, 1.0] * 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_sinusoidal_pe_dtype_and_device(dtype, device):
    pe = sinusoidal_positional_encoding(5, 4, dtype=dtype, device=device)
    assert pe.dtype == dtype and pe.device.type == device.type
    torch.testing.assert_close(pe.double().cpu(), closed_form_pe(5, 4), rtol=1e-2, atol=1e-2)


def test_add_positional_encoding_broadcasts_first_rows_over_the_batch(gen):
    x = torch.randn(3, 4, 6, generator=gen, dtype=torch.float64)
    pe = sinusoidal_positional_encoding(9, 6, dtype=torch.float64)
    out = add_positional_encoding(x, pe)
    assert out.shape == x.shape
    for b in range(3):
        torch.testing.assert_close(out[b], x[b] + pe[:4], **TIGHT)


def test_learned_positional_encoding_is_a_trainable_leaf():
    table = learned_positional_encoding(7, 6, generator=torch.Generator().manual_seed(0),
                                        dtype=torch.float64)
    assert table.shape == (7, 6) and table.dtype == torch.float64
    assert table.is_leaf and table.requires_grad
    again = learned_positional_encoding(7, 6, generator=torch.Generator().manual_seed(0),
                                        dtype=torch.float64)
    assert torch.equal(table, again)


# ---- RoPE ----------------------------------------------------------------------------------

def closed_form_rope(x, positions, base=10000.0):
    """Rotate pair (2i, 2i+1) of the row at position p by p * base^(-2i/D), with loops."""
    out = x.clone()
    dim = x.size(-1)
    for row, p in enumerate(positions):
        for i in range(dim // 2):
            theta = p * base ** (-2 * i / dim)
            c, s = math.cos(theta), math.sin(theta)
            x0, x1 = x[..., row, 2 * i], x[..., row, 2 * i + 1]
            out[..., row, 2 * i] = x0 * c - x1 * s
            out[..., row, 2 * i + 1] = x0 * s + x1 * c
    return out


def test_rotate_half_pairs_turns_each_pair_by_90_degrees():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    assert rotate_half_pairs(x).tolist() == [[-2.0, 1.0, -4.0, 3.0]]
    assert torch.equal(rotate_half_pairs(rotate_half_pairs(x)), -x)


@pytest.mark.parametrize("shape", [(5, 4), (3, 7, 6), (2, 3, 4, 8)])
def test_apply_rope_matches_the_closed_form(shape, gen):
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    got = apply_rope(x)
    torch.testing.assert_close(got, closed_form_rope(x, range(shape[-2])), **TIGHT)


def test_apply_rope_with_explicit_positions_and_base(gen):
    x = torch.randn(2, 4, 6, generator=gen, dtype=torch.float64)
    positions = torch.tensor([3, 0, 11, 5])
    got = apply_rope(x, positions, base=500.0)
    torch.testing.assert_close(got, closed_form_rope(x, positions.tolist(), base=500.0), **TIGHT)


@pytest.mark.parametrize("dim", [2, 6, 8])
def test_rope_dot_product_depends_only_on_relative_position(dim, gen):
    q = torch.randn(dim, generator=gen, dtype=torch.float64)
    k = torch.randn(dim, generator=gen, dtype=torch.float64)
    length = 12
    q_rot = apply_rope(q.expand(length, dim).clone())  # q at positions 0..11
    k_rot = apply_rope(k.expand(length, dim).clone())  # k at positions 0..11
    dots = q_rot @ k_rot.T                              # dots[m, n] = rot(q, m) . rot(k, n)
    by_offset = {}
    for m in range(length):
        for n in range(length):
            by_offset.setdefault(m - n, []).append(dots[m, n])
    for offset, values in by_offset.items():
        values = torch.stack(values)
        torch.testing.assert_close(values, values[0].expand_as(values), rtol=1e-10, atol=1e-10)
    # ...and the position does matter: different offsets give different dot products
    assert not torch.isclose(torch.stack(by_offset[0])[0], torch.stack(by_offset[3])[0])
    torch.testing.assert_close(dots[0, 0], q @ k, **TIGHT)  # offset 0: the plain dot product


def test_rope_preserves_the_norm_of_every_pair_and_position_zero_is_identity(gen):
    x = torch.randn(3, 9, 8, generator=gen, dtype=torch.float64)
    out = apply_rope(x)
    pair_norm = lambda t: t.reshape(*t.shape[:-1], -1, 2).norm(dim=-1)  # noqa: E731
    torch.testing.assert_close(pair_norm(out), pair_norm(x), **TIGHT)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), **TIGHT)
    torch.testing.assert_close(out[:, 0], x[:, 0], **TIGHT)
    assert not torch.allclose(out[:, 1], x[:, 1])


def test_apply_rope_float32_on_device(device):
    x = torch.randn(2, 5, 4, device=device)
    out = apply_rope(x)
    assert out.dtype == torch.float32 and out.device.type == device.type
    torch.testing.assert_close(out.double().cpu(), closed_form_rope(x.double().cpu(), range(5)),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_apply_rope_in_half_precision_rounds_only_the_result(dtype, gen):
    """The angles reach cos/sin in float64: at position 500 an angle rounded to fp16/bf16 first
    would be off by a radian or more; only the final multiply-add rounds to the input's dtype."""
    x = torch.randn(600, 8, generator=gen, dtype=torch.float64)
    exact = closed_form_rope(x, range(600))
    got = apply_rope(x.to(dtype)).double()
    assert got.dtype == torch.float64 and (got - exact).abs().max() < 0.05
