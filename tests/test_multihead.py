"""Notebook 06: multi-head attention against torch.nn.MultiheadAttention (batch_first=True).

PyTorch's masks have the opposite polarity for bool masks: its key_padding_mask and
attn_mask say True = IGNORE, ours say True = may attend.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tfmlib import (init_mha_params, linear, merge_heads, multi_head_attention, params_from_torch,
                    split_heads)

TIGHT = dict(rtol=1e-10, atol=1e-12)


def randomized(module: nn.Module, generator: torch.Generator) -> nn.Module:
    """Random values in every parameter, biases included (PyTorch starts them at zero)."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    return module.eval()


def torch_mha(d_model, num_heads, bias, generator):
    module = nn.MultiheadAttention(d_model, num_heads, bias=bias, batch_first=True,
                                   dtype=torch.float64)
    return randomized(module, generator)


CASES = ["self", "cross", "key_padding", "causal", "causal_and_padding", "per_head_mask"]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("d_model, num_heads", [(12, 3), (6, 1), (8, 4)])
@pytest.mark.parametrize("case", CASES)
def test_matches_nn_multihead_attention(case, d_model, num_heads, bias, gen):
    batch = 3
    lq = 5
    lk = 5 if case in ("self", "causal", "causal_and_padding") else 7
    module = torch_mha(d_model, num_heads, bias, gen)
    params = params_from_torch(module)
    query = torch.randn(batch, lq, d_model, generator=gen, dtype=torch.float64)
    if lk == lq and case != "per_head_mask":
        key = value = query
    else:
        key = torch.randn(batch, lk, d_model, generator=gen, dtype=torch.float64)
        value = torch.randn(batch, lk, d_model, generator=gen, dtype=torch.float64)

    torch_kwargs, ours = {}, None  # ours: bool mask, True = may attend
    lengths = torch.tensor([lk, 3, 1])
    ignore_key = torch.arange(lk)[None, :] >= lengths[:, None]                 # (B, Lk), True = ignore
    future = torch.ones(lq, lk, dtype=torch.bool).triu(diagonal=1)              # (Lq, Lk), True = ignore
    if case == "key_padding":
        torch_kwargs["key_padding_mask"] = ignore_key
        ours = ~ignore_key[:, None, None, :]
    elif case == "causal":
        torch_kwargs["attn_mask"] = future
        ours = ~future
    elif case == "causal_and_padding":
        torch_kwargs.update(key_padding_mask=ignore_key, attn_mask=future)
        ours = ~ignore_key[:, None, None, :] & ~future
    elif case == "per_head_mask":  # a different random mask for every (sample, head)
        allowed = torch.rand(batch, num_heads, lq, lk, generator=gen) < 0.5
        allowed[..., 0] = True
        torch_kwargs["attn_mask"] = ~allowed.reshape(batch * num_heads, lq, lk)
        ours = allowed

    expected, expected_weights = module(query, key, value, need_weights=True,
                                        average_attn_weights=False, **torch_kwargs)
    output, weights = multi_head_attention(query, key, value, params, num_heads, ours)
    assert output.shape == (batch, lq, d_model)
    assert weights.shape == (batch, num_heads, lq, lk)
    torch.testing.assert_close(output, expected, **TIGHT)
    torch.testing.assert_close(weights, expected_weights, **TIGHT)

    _, averaged = module(query, key, value, need_weights=True, **torch_kwargs)
    torch.testing.assert_close(weights.mean(dim=1), averaged, **TIGHT)


def test_gradients_match_nn_multihead_attention(gen):
    module = torch_mha(6, 3, True, gen)
    params = params_from_torch(module)
    for p in params.values():
        p.requires_grad_()
    query = torch.randn(3, 4, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(3, 5, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(3, 4, 6, generator=gen, dtype=torch.float64)

    expected, _ = module(query, memory, memory)
    ref_q, ref_m, ref_w, ref_b = torch.autograd.grad(
        expected, (query, memory, module.in_proj_weight, module.out_proj.bias), upstream)
    output, _ = multi_head_attention(query, memory, memory, params, 3)
    got_q, got_m, *got_w, got_b = torch.autograd.grad(
        output, (query, memory, params["w_q"], params["w_k"], params["w_v"], params["b_o"]), upstream)
    torch.testing.assert_close(got_q, ref_q, **TIGHT)
    torch.testing.assert_close(got_m, ref_m, **TIGHT)
    torch.testing.assert_close(torch.cat(got_w), ref_w, **TIGHT)
    torch.testing.assert_close(got_b, ref_b, **TIGHT)


def test_each_projection_is_used_for_its_own_input(gen):
    """Q, K, V use w_q, w_k, w_v: changing one weight changes the output through its input only."""
    params = init_mha_params(6, generator=gen, dtype=torch.float64)
    query = torch.randn(2, 3, 6, generator=gen, dtype=torch.float64)
    memory = torch.randn(2, 4, 6, generator=gen, dtype=torch.float64)
    base, base_weights = multi_head_attention(query, memory, memory, params, 2)
    changed_v = dict(params, w_v=params["w_v"] + 1.0)
    out_v, weights_v = multi_head_attention(query, memory, memory, changed_v, 2)
    torch.testing.assert_close(weights_v, base_weights, **TIGHT)  # w_v does not touch the weights
    assert not torch.allclose(out_v, base)
    changed_k = dict(params, w_k=params["w_k"] + 1.0)
    _, weights_k = multi_head_attention(query, memory, memory, changed_k, 2)
    assert not torch.allclose(weights_k, base_weights)


def test_on_device_in_float32(device, gen):
    module = torch_mha(8, 2, True, gen)
    params = params_from_torch(module)
    query = torch.randn(3, 4, 8, generator=gen, dtype=torch.float64)
    memory = torch.randn(3, 6, 8, generator=gen, dtype=torch.float64)
    mask = (torch.arange(6)[None, :] < torch.tensor([6, 2, 4])[:, None])[:, None, None, :]
    expected, expected_weights = multi_head_attention(query, memory, memory, params, 2, mask)
    to = dict(device=device, dtype=torch.float32)
    output, weights = multi_head_attention(query.to(**to), memory.to(**to), memory.to(**to),
                                           {k: v.to(**to) for k, v in params.items()}, 2,
                                           mask.to(device))
    assert output.device.type == device.type and output.dtype == torch.float32
    torch.testing.assert_close(output.cpu().double(), expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(weights.cpu().double(), expected_weights, rtol=1e-4, atol=1e-5)


# ---- pieces ----------------------------------------------------------------------------------

@pytest.mark.parametrize("batch, length, d_model, num_heads", [(3, 5, 12, 3), (1, 1, 4, 4), (2, 7, 6, 1)])
def test_split_and_merge_heads_round_trip(batch, length, d_model, num_heads, gen):
    x = torch.randn(batch, length, d_model, generator=gen, dtype=torch.float64)
    heads = split_heads(x, num_heads)
    d_k = d_model // num_heads
    assert heads.shape == (batch, num_heads, length, d_k)
    assert torch.equal(merge_heads(heads), x)
    y = torch.randn(batch, num_heads, length, d_k, generator=gen, dtype=torch.float64)
    assert torch.equal(split_heads(merge_heads(y), num_heads), y)


@pytest.mark.parametrize("num_heads", [1, 2, 3, 6])
def test_split_heads_puts_feature_slice_h_into_head_h(num_heads, gen):
    batch, length, d_model = 3, 5, 6
    x = torch.randn(batch, length, d_model, generator=gen, dtype=torch.float64)
    heads = split_heads(x, num_heads)
    d_k = d_model // num_heads
    for h in range(num_heads):
        assert torch.equal(heads[:, h], x[..., h * d_k:(h + 1) * d_k])


def test_merge_heads_puts_head_h_back_into_feature_slice_h(gen):
    heads = torch.randn(2, 3, 4, 5, generator=gen, dtype=torch.float64)  # (B, H, L, d_k)
    merged = merge_heads(heads)
    assert merged.shape == (2, 4, 15)
    for h in range(3):
        assert torch.equal(merged[..., h * 5:(h + 1) * 5], heads[:, h])


@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize("x_shape", [(5,), (3, 5), (2, 3, 5)])
def test_linear_matches_f_linear(x_shape, use_bias, gen):
    x = torch.randn(*x_shape, generator=gen, dtype=torch.float64)
    weight = torch.randn(7, 5, generator=gen, dtype=torch.float64)  # (out, in)
    bias = torch.randn(7, generator=gen, dtype=torch.float64) if use_bias else None
    torch.testing.assert_close(linear(x, weight, bias), F.linear(x, weight, bias), **TIGHT)


def test_init_mha_params_shapes_bounds_and_reproducibility():
    params = init_mha_params(10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    again = init_mha_params(10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    bound = (6 / 20) ** 0.5  # Xavier uniform for (10, 10)
    assert set(params) == {"w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_o", "b_o"}
    for name in ("q", "k", "v", "o"):
        w, b = params[f"w_{name}"], params[f"b_{name}"]
        assert w.shape == (10, 10) and w.dtype == torch.float64
        assert w.abs().max() <= bound and w.abs().max() > bound / 2
        assert torch.equal(b, torch.zeros(10, dtype=torch.float64))
        assert torch.equal(w, again[f"w_{name}"])
    assert not torch.equal(params["w_q"], params["w_k"])  # four separate projections
