"""Notebook 04: padding mask (B, 1, 1, L), causal mask (1, 1, L, L), combined with &; True = may attend."""
import pytest
import torch

from tfmlib import causal_mask, padding_mask, scaled_dot_product_attention, target_mask

PAD_ID = 0
IDS = torch.tensor([[5, 6, 7, 8, 9],
                    [5, 6, 0, 0, 0],
                    [7, 0, 0, 0, 0]])  # lengths 5, 2, 1


def test_padding_mask_shape_dtype_and_values(device):
    ids = IDS.to(device)
    mask = padding_mask(ids, PAD_ID)
    assert mask.shape == (3, 1, 1, 5)
    assert mask.dtype == torch.bool and mask.device.type == device.type
    lengths = [5, 2, 1]
    for b, length in enumerate(lengths):
        assert mask[b, 0, 0].tolist() == [j < length for j in range(5)]


def test_padding_mask_uses_the_given_pad_id():
    ids = torch.tensor([[1, 2, 9, 9]])
    assert padding_mask(ids, pad_id=9)[0, 0, 0].tolist() == [True, True, False, False]


def test_padding_mask_masks_keys_not_queries(gen):
    batch, length, heads, d_k = 3, 5, 2, 4
    q = torch.randn(batch, heads, length, d_k, generator=gen, dtype=torch.float64)
    k = torch.randn(batch, heads, length, d_k, generator=gen, dtype=torch.float64)
    v = torch.randn(batch, heads, length, 3, generator=gen, dtype=torch.float64)
    _, weights = scaled_dot_product_attention(q, k, v, padding_mask(IDS, PAD_ID))
    assert weights.shape == (batch, heads, length, length)
    is_pad = IDS == PAD_ID                                   # (B, L)
    # every query, padded or not, gives zero weight to every padded key...
    assert torch.all(weights.masked_select(is_pad[:, None, None, :].expand_as(weights)) == 0)
    # ...and still attends somewhere: no query row is wiped out (which a query-axis mask would do)
    torch.testing.assert_close(weights.sum(-1), torch.ones(batch, heads, length, dtype=torch.float64))


@pytest.mark.parametrize("length", [1, 2, 5])
def test_causal_mask_is_lower_triangular_including_the_diagonal(length, device):
    mask = causal_mask(length, device=device)
    assert mask.shape == (1, 1, length, length)
    assert mask.dtype == torch.bool and mask.device.type == device.type
    expected = [[key <= query for key in range(length)] for query in range(length)]
    assert mask[0, 0].tolist() == expected


def test_padding_and_causal_combine_with_and_into_b_1_l_l(device):
    ids = IDS.to(device)
    combined = padding_mask(ids, PAD_ID) & causal_mask(5, device=device)
    assert combined.shape == (3, 1, 5, 5)
    assert torch.equal(target_mask(ids, PAD_ID), combined)
    for b in range(3):
        for query in range(5):
            for key in range(5):
                expected = key <= query and ids[b, key].item() != PAD_ID
                assert combined[b, 0, query, key].item() == expected


def test_target_mask_hides_the_future_in_attention(gen):
    ids = IDS[:1]  # no padding: only the causal part
    x = torch.randn(1, 1, 5, 4, generator=gen, dtype=torch.float64)
    _, weights = scaled_dot_product_attention(x, x, x, target_mask(ids, PAD_ID))
    assert torch.all(torch.triu(weights[0, 0], diagonal=1) == 0)
    lower = torch.ones(5, 5, dtype=torch.bool).tril()
    assert torch.all(weights[0, 0][lower] > 0)
