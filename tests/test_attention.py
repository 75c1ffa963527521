"""Notebook 05: scaled dot-product attention against torch.nn.functional.scaled_dot_product_attention."""
import pytest
import torch
import torch.nn.functional as F

from tfmlib import scaled_dot_product_attention

TIGHT = dict(rtol=1e-10, atol=1e-12)

# (leading axes, Lq, Lk, d_k, d_v): odd batch, Lq != Lk, d_v != d_k, extra leading axes
SHAPES = [((3,), 4, 6, 5, 7),
          ((3, 2), 5, 3, 4, 2),
          ((1, 3, 2), 1, 7, 3, 5),
          ((5,), 6, 6, 2, 3)]


def make_mask(kind, lead, lq, lk, generator):
    """A bool mask (True = may attend) that leaves at least one key visible in every row."""
    if kind is None:
        return None
    if kind == "random":
        mask = torch.rand(*lead, lq, lk, generator=generator) < 0.5
        keep = torch.randint(0, lk, (*lead, lq, 1), generator=generator)
        return mask.scatter(-1, keep, True)
    if kind == "padding":  # (B, 1, ..., 1, Lk): per sample, the last keys are padding
        lengths = torch.randint(1, lk + 1, (lead[0],), generator=generator)
        mask = torch.arange(lk)[None, :] < lengths[:, None]            # (B, Lk)
        return mask.reshape(lead[0], *([1] * (len(lead) - 1)), 1, lk)
    if kind == "causal":  # a 2-D (Lq, Lk) mask broadcast over every leading axis
        offset = max(0, lk - lq)
        return torch.arange(lk)[None, :] <= torch.arange(lq)[:, None] + offset
    raise ValueError(kind)


def torch_weights(q, k, mask):
    """Attention weights from PyTorch itself: attending over an identity matrix of values."""
    lk = k.size(-2)
    eye = torch.eye(lk, dtype=q.dtype).expand(*k.shape[:-2], lk, lk)
    return F.scaled_dot_product_attention(q, k, eye, attn_mask=mask)


@pytest.mark.parametrize("mask_kind", [None, "random", "padding", "causal"])
@pytest.mark.parametrize("lead, lq, lk, d_k, d_v", SHAPES)
def test_matches_torch_sdpa_in_float64(lead, lq, lk, d_k, d_v, mask_kind, gen):
    q = torch.randn(*lead, lq, d_k, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(*lead, lk, d_k, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(*lead, lk, d_v, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = make_mask(mask_kind, lead, lq, lk, gen)

    context, weights = scaled_dot_product_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert context.shape == (*lead, lq, d_v)
    assert weights.shape == (*lead, lq, lk)
    torch.testing.assert_close(context, expected, **TIGHT)
    torch.testing.assert_close(weights, torch_weights(q.detach(), k.detach(), mask), **TIGHT)

    # the gradients agree too
    upstream = torch.randn(context.shape, generator=gen, dtype=torch.float64)
    ours = torch.autograd.grad(context, (q, k, v), upstream)
    theirs = torch.autograd.grad(expected, (q, k, v), upstream)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, **TIGHT)


def test_leading_axes_broadcast_like_torch(gen):
    q = torch.randn(3, 2, 4, 5, generator=gen, dtype=torch.float64)
    k = torch.randn(3, 1, 6, 5, generator=gen, dtype=torch.float64)   # shared by both heads
    v = torch.randn(1, 2, 6, 3, generator=gen, dtype=torch.float64)   # shared by the batch
    context, weights = scaled_dot_product_attention(q, k, v)
    expected, _ = scaled_dot_product_attention(q, k.expand(3, 2, 6, 5), v.expand(3, 2, 6, 3))
    assert context.shape == (3, 2, 4, 3) and weights.shape == (3, 2, 4, 6)
    torch.testing.assert_close(context, expected, **TIGHT)


def test_known_small_case_by_hand():
    # one query, two keys: scores [2, 0] / sqrt(2)
    q = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    k = torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    v = torch.tensor([[10.0], [20.0]], dtype=torch.float64)
    context, weights = scaled_dot_product_attention(q, k, v)
    e = torch.exp(torch.tensor(2.0 / 2 ** 0.5, dtype=torch.float64))
    expected_weights = torch.stack([e / (e + 1), 1 / (e + 1)])[None]
    torch.testing.assert_close(weights, expected_weights, **TIGHT)
    torch.testing.assert_close(context, expected_weights @ v, **TIGHT)


@pytest.mark.parametrize("lead, lq, lk, d_k, d_v", SHAPES)
def test_weights_rows_sum_to_one_and_masked_keys_get_exactly_zero(lead, lq, lk, d_k, d_v, gen):
    q = torch.randn(*lead, lq, d_k, generator=gen, dtype=torch.float64)
    k = torch.randn(*lead, lk, d_k, generator=gen, dtype=torch.float64)
    v = torch.randn(*lead, lk, d_v, generator=gen, dtype=torch.float64)
    mask = make_mask("random", lead, lq, lk, gen)
    _, weights = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(weights.sum(-1), torch.ones(*lead, lq, dtype=torch.float64), **TIGHT)
    assert torch.all(weights[~mask] == 0)
    assert torch.all(weights[mask] > 0)


def mask_with_fully_masked_rows():
    """(B=3, Lq=4, Lk=5): sample 0 has its query row 2 fully masked; sample 2 sees no key at all."""
    mask = torch.ones(3, 4, 5, dtype=torch.bool)
    mask[0, :, 4] = False   # padding
    mask[0, 2] = False      # a fully masked query row
    mask[1] = torch.ones(4, 5, dtype=torch.bool).tril()
    mask[2] = False         # a fully padded sample
    return mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_fully_masked_rows_give_exact_zeros_and_no_nan(dtype, device):
    generator = torch.Generator().manual_seed(7)
    q = torch.randn(3, 4, 6, generator=generator).to(device, dtype).requires_grad_()
    k = torch.randn(3, 5, 6, generator=generator).to(device, dtype).requires_grad_()
    v = torch.randn(3, 5, 3, generator=generator).to(device, dtype).requires_grad_()
    mask = mask_with_fully_masked_rows().to(device)
    dead = ~mask.any(-1)   # (B, Lq): rows with nothing to attend to
    assert dead.sum() == 1 + 4

    context, weights = scaled_dot_product_attention(q, k, v, mask)
    assert context.dtype == dtype and weights.dtype == dtype
    assert torch.isfinite(context).all() and torch.isfinite(weights).all()
    assert torch.all(weights[dead] == 0) and torch.all(context[dead] == 0)
    tolerance = {torch.float16: 3e-3, torch.bfloat16: 2e-2}.get(dtype, 1e-6)
    row_sums = weights[~dead].float().sum(-1)
    torch.testing.assert_close(row_sums, torch.ones_like(row_sums), rtol=0, atol=tolerance)

    # gradients through a fully masked row stay finite, and that row's query gets none
    (context.float().square().sum() + weights.float().square().sum()).backward()
    for tensor in (q, k, v):
        assert torch.isfinite(tensor.grad).all()
    assert torch.all(q.grad[dead] == 0)
    assert torch.all(k.grad[2] == 0) and torch.all(v.grad[2] == 0)  # nobody looked at sample 2


def test_fully_masked_row_does_not_change_the_other_rows(gen):
    q = torch.randn(3, 4, 6, generator=gen, dtype=torch.float64)
    k = torch.randn(3, 5, 6, generator=gen, dtype=torch.float64)
    v = torch.randn(3, 5, 3, generator=gen, dtype=torch.float64)
    mask = mask_with_fully_masked_rows()
    alive = mask.any(-1)
    context, weights = scaled_dot_product_attention(q, k, v, mask)
    safe_mask = mask.clone()
    safe_mask[~alive] = True  # give torch something to attend to, then compare the other rows
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=safe_mask)
    torch.testing.assert_close(context[alive], expected[alive], **TIGHT)


def test_float32_on_device_matches_float64_on_cpu(device, gen):
    q = torch.randn(3, 2, 4, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(3, 2, 5, 8, generator=gen, dtype=torch.float64)
    v = torch.randn(3, 2, 5, 6, generator=gen, dtype=torch.float64)
    mask = make_mask("random", (3, 2), 4, 5, gen)
    ref_context, ref_weights = scaled_dot_product_attention(q, k, v, mask)
    context, weights = scaled_dot_product_attention(*(t.to(device, torch.float32) for t in (q, k, v)),
                                                    mask.to(device))
    assert context.device.type == device.type
    torch.testing.assert_close(context.cpu().double(), ref_context, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(weights.cpu().double(), ref_weights, rtol=1e-4, atol=1e-5)
