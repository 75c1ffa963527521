"""Notebook 08: encoder/decoder layers and stacks against nn.TransformerEncoder(Layer) / Decoder(Layer).

PyTorch runs with batch_first=True, dropout=0 and in eval mode; its bool masks say
True = IGNORE, ours True = may attend.
"""
import pytest
import torch
from torch import nn

from tfmlib import (decoder, decoder_layer, encoder, encoder_layer, init_decoder_layer_params,
                    init_encoder_layer_params, multi_head_attention, params_from_torch)

TIGHT = dict(rtol=1e-9, atol=1e-10)
D_MODEL, HEADS, D_FF = 12, 3, 20

NORM_AND_ACTIVATION = [(False, "relu"), (False, "gelu"), (True, "relu"), (True, "gelu")]


def randomized(module: nn.Module, seed: int) -> nn.Module:
    """Random values in every parameter (biases and LayerNorms too), different in every layer."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p + 0.3 * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    return module.eval()


def layer_kwargs(norm_first, activation, eps=1e-5):
    return dict(d_model=D_MODEL, nhead=HEADS, dim_feedforward=D_FF, dropout=0.0,
                activation=activation, batch_first=True, norm_first=norm_first,
                layer_norm_eps=eps, dtype=torch.float64)


def ignore_after(lengths, length):
    """(B, L) bool, True on padded positions: PyTorch's key_padding_mask polarity."""
    return torch.arange(length)[None, :] >= torch.tensor(lengths)[:, None]


def future(length):
    """(L, L) bool, True above the diagonal: PyTorch's causal attn_mask polarity."""
    return torch.ones(length, length, dtype=torch.bool).triu(diagonal=1)


# ---- encoder layer --------------------------------------------------------------------------

@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("norm_first, activation", NORM_AND_ACTIVATION)
def test_encoder_layer_matches_nn_transformer_encoder_layer(norm_first, activation, padded, gen):
    layer = randomized(nn.TransformerEncoderLayer(**layer_kwargs(norm_first, activation)), seed=1)
    x = torch.randn(3, 5, D_MODEL, generator=gen, dtype=torch.float64)
    kpm = ignore_after([5, 2, 4], 5) if padded else None
    expected = layer(x, src_key_padding_mask=kpm)
    mask = None if kpm is None else ~kpm[:, None, None, :]  # (B, 1, 1, L)
    got = encoder_layer(x, params_from_torch(layer), HEADS, mask,
                        norm_first=norm_first, activation=activation)
    assert got.shape == x.shape
    torch.testing.assert_close(got, expected, **TIGHT)


def test_encoder_layer_with_causal_mask_and_other_eps(gen):
    layer = randomized(nn.TransformerEncoderLayer(**layer_kwargs(False, "relu", eps=1e-3)), seed=2)
    x = torch.randn(3, 6, D_MODEL, generator=gen, dtype=torch.float64)
    expected = layer(x, src_mask=future(6))
    got = encoder_layer(x, params_from_torch(layer), HEADS, ~future(6), eps=1e-3)
    torch.testing.assert_close(got, expected, **TIGHT)


def test_encoder_layer_need_weights_returns_the_self_attention_weights(gen):
    layer = randomized(nn.TransformerEncoderLayer(**layer_kwargs(False, "relu")), seed=3)
    x = torch.randn(3, 5, D_MODEL, generator=gen, dtype=torch.float64)
    kpm = ignore_after([5, 2, 4], 5)
    out, weights = encoder_layer(x, params_from_torch(layer), HEADS, ~kpm[:, None, None, :],
                                 need_weights=True)
    torch.testing.assert_close(out, layer(x, src_key_padding_mask=kpm), **TIGHT)
    # Post-LN: the self-attention reads x itself
    _, expected = layer.self_attn(x, x, x, key_padding_mask=kpm, average_attn_weights=False)
    assert weights.shape == (3, HEADS, 5, 5)
    torch.testing.assert_close(weights, expected, **TIGHT)


# ---- decoder layer --------------------------------------------------------------------------

@pytest.mark.parametrize("masks", ["none", "causal", "causal_and_padding"])
@pytest.mark.parametrize("norm_first, activation", NORM_AND_ACTIVATION)
def test_decoder_layer_matches_nn_transformer_decoder_layer(norm_first, activation, masks, gen):
    layer = randomized(nn.TransformerDecoderLayer(**layer_kwargs(norm_first, activation)), seed=4)
    lt, ls = 5, 7
    tgt = torch.randn(3, lt, D_MODEL, generator=gen, dtype=torch.float64)
    memory = torch.randn(3, ls, D_MODEL, generator=gen, dtype=torch.float64)
    torch_masks, self_mask, memory_mask = {}, None, None
    if masks != "none":
        torch_masks["tgt_mask"] = future(lt)
        self_mask = ~future(lt)[None, None]                                  # (1, 1, Lt, Lt)
    if masks == "causal_and_padding":
        tgt_kpm, mem_kpm = ignore_after([5, 3, 1], lt), ignore_after([7, 2, 5], ls)
        torch_masks.update(tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=mem_kpm)
        self_mask = self_mask & ~tgt_kpm[:, None, None, :]                   # (B, 1, Lt, Lt)
        memory_mask = ~mem_kpm[:, None, None, :]                             # (B, 1, 1, Ls)
    expected = layer(tgt, memory, **torch_masks)
    got = decoder_layer(tgt, memory, params_from_torch(layer), HEADS, self_mask, memory_mask,
                        norm_first=norm_first, activation=activation)
    assert got.shape == tgt.shape
    torch.testing.assert_close(got, expected, **TIGHT)


def test_decoder_layer_need_weights_shapes_and_masks(gen):
    params = init_decoder_layer_params(D_MODEL, D_FF, generator=gen, dtype=torch.float64)
    tgt = torch.randn(3, 4, D_MODEL, generator=gen, dtype=torch.float64)
    memory = torch.randn(3, 6, D_MODEL, generator=gen, dtype=torch.float64)
    mem_kpm = ignore_after([6, 1, 3], 6)
    out, (self_w, cross_w) = decoder_layer(tgt, memory, params, HEADS, ~future(4)[None, None],
                                           ~mem_kpm[:, None, None, :], need_weights=True)
    assert out.shape == tgt.shape
    assert self_w.shape == (3, HEADS, 4, 4) and cross_w.shape == (3, HEADS, 4, 6)
    assert torch.all(self_w[..., future(4)] == 0)                 # no peeking at the future
    assert torch.all(cross_w.masked_select(mem_kpm[:, None, None, :].expand_as(cross_w)) == 0)


def test_cross_attention_reads_keys_and_values_from_memory(gen):
    params = init_decoder_layer_params(D_MODEL, D_FF, generator=gen, dtype=torch.float64)
    tgt = torch.randn(2, 3, D_MODEL, generator=gen, dtype=torch.float64)
    memory = torch.randn(2, 5, D_MODEL, generator=gen, dtype=torch.float64)
    out = decoder_layer(tgt, memory, params, HEADS)
    other = decoder_layer(tgt, memory + 1.0, params, HEADS)
    assert not torch.allclose(out, other)


# ---- stacks ---------------------------------------------------------------------------------

@pytest.mark.parametrize("final_norm", [True, False])
@pytest.mark.parametrize("norm_first, activation", [(False, "relu"), (True, "gelu")])
def test_encoder_stack_matches_nn_transformer_encoder(norm_first, activation, final_norm, gen):
    layer = nn.TransformerEncoderLayer(**layer_kwargs(norm_first, activation))
    norm = nn.LayerNorm(D_MODEL, dtype=torch.float64) if final_norm else None
    stack = randomized(nn.TransformerEncoder(layer, num_layers=3, norm=norm,
                                             enable_nested_tensor=False), seed=5)
    x = torch.randn(3, 6, D_MODEL, generator=gen, dtype=torch.float64)
    kpm = ignore_after([6, 3, 1], 6)
    expected = stack(x, src_key_padding_mask=kpm)
    layers = [params_from_torch(each) for each in stack.layers]
    norm_params = ({"gamma": stack.norm.weight.detach(), "beta": stack.norm.bias.detach()}
                   if final_norm else None)
    got = encoder(x, layers, HEADS, ~kpm[:, None, None, :], final_norm=norm_params,
                  norm_first=norm_first, activation=activation)
    torch.testing.assert_close(got, expected, **TIGHT)


@pytest.mark.parametrize("norm_first, activation", [(False, "gelu"), (True, "relu")])
def test_decoder_stack_matches_nn_transformer_decoder(norm_first, activation, gen):
    layer = nn.TransformerDecoderLayer(**layer_kwargs(norm_first, activation))
    stack = randomized(nn.TransformerDecoder(layer, num_layers=3,
                                             norm=nn.LayerNorm(D_MODEL, dtype=torch.float64)), seed=6)
    lt, ls = 5, 4
    tgt = torch.randn(3, lt, D_MODEL, generator=gen, dtype=torch.float64)
    memory = torch.randn(3, ls, D_MODEL, generator=gen, dtype=torch.float64)
    tgt_kpm, mem_kpm = ignore_after([5, 2, 4], lt), ignore_after([4, 4, 1], ls)
    expected = stack(tgt, memory, tgt_mask=future(lt), tgt_key_padding_mask=tgt_kpm,
                     memory_key_padding_mask=mem_kpm)
    got = decoder(tgt, memory, [params_from_torch(each) for each in stack.layers], HEADS,
                  self_mask=~future(lt)[None, None] & ~tgt_kpm[:, None, None, :],
                  memory_mask=~mem_kpm[:, None, None, :],
                  final_norm={"gamma": stack.norm.weight.detach(), "beta": stack.norm.bias.detach()},
                  norm_first=norm_first, activation=activation)
    torch.testing.assert_close(got, expected, **TIGHT)


def test_encoder_on_device_in_float32(device, gen):
    layers = [init_encoder_layer_params(8, 16, generator=gen, dtype=torch.float64) for _ in range(2)]
    x = torch.randn(3, 5, 8, generator=gen, dtype=torch.float64)
    mask = ~ignore_after([5, 1, 3], 5)[:, None, None, :]
    expected = encoder(x, layers, 2, mask, norm_first=True)
    to = dict(device=device, dtype=torch.float32)
    moved = [{name: {k: v.to(**to) for k, v in part.items()} for name, part in each.items()}
             for each in layers]
    got = encoder(x.to(**to), moved, 2, mask.to(device), norm_first=True)
    assert got.device.type == device.type and got.dtype == torch.float32
    torch.testing.assert_close(got.cpu().double(), expected, rtol=1e-4, atol=1e-4)


# ---- initialisation -------------------------------------------------------------------------

def test_init_layer_params_structure_and_independent_norms():
    enc = init_encoder_layer_params(8, 16, generator=torch.Generator().manual_seed(0))
    dec = init_decoder_layer_params(8, 16, generator=torch.Generator().manual_seed(0))
    assert set(enc) == {"self_attn", "ffn", "norm1", "norm2"}
    assert set(dec) == {"self_attn", "cross_attn", "ffn", "norm1", "norm2", "norm3"}
    assert enc["norm1"]["gamma"] is not enc["norm2"]["gamma"]
    assert not torch.equal(dec["self_attn"]["w_q"], dec["cross_attn"]["w_q"])
    x = torch.randn(2, 3, 8)
    assert encoder_layer(x, enc, 2).shape == (2, 3, 8)
    assert decoder_layer(x, torch.randn(2, 5, 8), dec, 4).shape == (2, 3, 8)


def test_encoder_layer_self_attention_uses_the_mask(gen):
    params = init_encoder_layer_params(8, 16, generator=gen, dtype=torch.float64)
    x = torch.randn(2, 4, 8, generator=gen, dtype=torch.float64)
    mask = ~ignore_after([4, 2], 4)[:, None, None, :]
    _, weights = encoder_layer(x, params, 2, mask, need_weights=True)
    _, expected = multi_head_attention(x, x, x, params["self_attn"], 2, mask)
    torch.testing.assert_close(weights, expected, **TIGHT)
    assert torch.all(weights[1, ..., 2:] == 0)
