"""Notebook 08: encoder/decoder layers and stacks against nn.TransformerEncoder(Layer) / Decoder(Layer).

PyTorch runs with batch_first=True, dropout=0 and in eval mode; its bool masks say
True = IGNORE, ours True = may attend.
"""
import pytest
import torch
from torch import nn

import tfmlib.encoder_decoder
from tfmlib import (decoder, decoder_layer, encoder, encoder_layer, init_decoder_layer_params,
                    init_encoder_layer_params, multi_head_attention, params_from_torch,
                    stack_attention_weights)

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


def test_one_layers_attention_weights_are_its_self_attention_weights(gen):
    layer = randomized(nn.TransformerEncoderLayer(**layer_kwargs(False, "relu")), seed=3)
    x = torch.randn(3, 5, D_MODEL, generator=gen, dtype=torch.float64)
    kpm = ignore_after([5, 2, 4], 5)
    params, mask = params_from_torch(layer), ~kpm[:, None, None, :]
    out = encoder_layer(x, params, HEADS, mask)
    assert isinstance(out, torch.Tensor)                      # one return type: the hidden states
    torch.testing.assert_close(out, layer(x, src_key_padding_mask=kpm), **TIGHT)
    weights = stack_attention_weights(x, [params], HEADS, mask)
    assert list(weights) == ["self_attn"] and len(weights["self_attn"]) == 1
    # Post-LN: the self-attention reads x itself
    _, expected = layer.self_attn(x, x, x, key_padding_mask=kpm, average_attn_weights=False)
    assert weights["self_attn"][0].shape == (3, HEADS, 5, 5)
    torch.testing.assert_close(weights["self_attn"][0], expected, **TIGHT)


@pytest.mark.parametrize("mask, error, needles", [
    (torch.ones(2, 1, 1, 5), TypeError, ["mask", "float32", "bool"]),
    (torch.ones(2, 1, 1, 5, dtype=torch.long), TypeError, ["mask", "int64"]),
    (torch.ones(2, 1, 1, 4, dtype=torch.bool), ValueError,
     ["mask", "(2, 1, 1, 4)", "(2, 4, 5, 5)", "(B, H, L, L)"]),
    (torch.ones(2, 3, 5, 5, dtype=torch.bool), ValueError, ["mask", "(2, 3, 5, 5)", "(2, 4, 5, 5)"]),
    ([[True] * 5], TypeError, ["mask", "list"]),
])
def test_encoder_layer_checks_its_mask_against_the_scores_shape(mask, error, needles, monkeypatch):
    """The mask is checked against (B, H, L, L), num_heads included, before any attention runs."""
    params = init_encoder_layer_params(8, 16, generator=torch.Generator().manual_seed(0))

    def no_attention(*args, **kwargs):
        raise AssertionError("attention ran before the mask was checked")

    monkeypatch.setattr(tfmlib.encoder_decoder, "multi_head_attention", no_attention)
    with pytest.raises(error) as info:
        encoder_layer(torch.randn(2, 5, 8), params, 4, mask)
    for needle in needles:
        assert needle in str(info.value), str(info.value)


@pytest.mark.parametrize("layer", ["encoder", "decoder"])
@pytest.mark.parametrize("num_heads, error", [(0, ValueError), (-2, ValueError), (2.0, TypeError),
                                              (True, TypeError)])
def test_both_layers_check_num_heads(layer, num_heads, error):
    """Checked before the masks, whose expected shape (B, H, ...) needs it."""
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    with pytest.raises(error, match="num_heads"):
        if layer == "encoder":
            encoder_layer(x, init_encoder_layer_params(8, 16), num_heads,
                          torch.ones(2, 1, 1, 3, dtype=torch.bool))
        else:
            decoder_layer(x, memory, init_decoder_layer_params(8, 16), num_heads,
                          torch.ones(1, 1, 3, 3, dtype=torch.bool), torch.ones(2, 1, 1, 4, dtype=torch.bool))


def test_decoder_layer_checks_both_masks_against_the_scores_shapes():
    x, memory, params = torch.randn(2, 3, 8), torch.randn(2, 4, 8), init_decoder_layer_params(8, 16)
    with pytest.raises(ValueError, match=r"self_mask.*\(2, 2, 3, 3\)"):
        decoder_layer(x, memory, params, 2, torch.ones(2, 1, 4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"memory_mask.*\(2, 2, 3, 4\)"):
        decoder_layer(x, memory, params, 2, None, torch.ones(2, 1, 1, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="memory_mask"):
        decoder_layer(x, memory, params, 2, None, torch.ones(2, 1, 1, 4))


def test_the_layers_have_no_need_weights_switch():
    import inspect
    for layer in (encoder_layer, decoder_layer):
        assert "need_weights" not in inspect.signature(layer).parameters


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


def test_decoder_attention_weights_shapes_and_masks(gen):
    params = init_decoder_layer_params(D_MODEL, D_FF, generator=gen, dtype=torch.float64)
    tgt = torch.randn(3, 4, D_MODEL, generator=gen, dtype=torch.float64)
    memory = torch.randn(3, 6, D_MODEL, generator=gen, dtype=torch.float64)
    mem_kpm = ignore_after([6, 1, 3], 6)
    weights = stack_attention_weights(tgt, [params], HEADS, ~future(4)[None, None], memory=memory,
                                      memory_mask=~mem_kpm[:, None, None, :])
    assert list(weights) == ["self_attn", "cross_attn"]
    (self_w,), (cross_w,) = weights["self_attn"], weights["cross_attn"]
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
    (weights,) = stack_attention_weights(x, [params], 2, mask)["self_attn"]
    _, expected = multi_head_attention(x, x, x, params["self_attn"], 2, mask)
    torch.testing.assert_close(weights, expected, **TIGHT)
    assert torch.all(weights[1, ..., 2:] == 0)


# ---- the attention weights of a stack ---------------------------------------------------------

def torch_attention_weights(stack: nn.Module, run) -> dict:
    """Run `run()`, a call of a PyTorch stack, with every attention module inside it asked for
    its per-head weights: the weights of the very attention calls the stack makes.
    -> {"self_attn": [(B, H, Lq, Lk)] per layer, and "cross_attn" for a decoder}."""
    captured, handles = {}, []

    def ask_for_weights(module, args, kwargs):
        return args, dict(kwargs, need_weights=True, average_attn_weights=False)

    for layer in stack.layers:
        for name, key in (("self_attn", "self_attn"), ("multihead_attn", "cross_attn")):
            if hasattr(layer, name):
                module = getattr(layer, name)
                handles.append(module.register_forward_pre_hook(ask_for_weights, with_kwargs=True))
                handles.append(module.register_forward_hook(
                    lambda module, args, output, key=key: captured.setdefault(key, []).append(output[1])))
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return captured


@pytest.mark.parametrize("norm_first, activation", [(False, "relu"), (True, "gelu")])
def test_stack_attention_weights_are_nn_transformer_encoders_per_head_weights(norm_first, activation, gen):
    layer = nn.TransformerEncoderLayer(**layer_kwargs(norm_first, activation))
    stack = randomized(nn.TransformerEncoder(layer, num_layers=3, enable_nested_tensor=False), seed=7)
    x = torch.randn(3, 6, D_MODEL, generator=gen, dtype=torch.float64)
    kpm = ignore_after([6, 3, 1], 6)
    expected = torch_attention_weights(stack, lambda: stack(x, src_key_padding_mask=kpm))
    got = stack_attention_weights(x, [params_from_torch(each) for each in stack.layers], HEADS,
                                  ~kpm[:, None, None, :], norm_first=norm_first, activation=activation)
    assert list(got) == ["self_attn"] and len(expected["self_attn"]) == len(got["self_attn"]) == 3
    for ours, theirs in zip(got["self_attn"], expected["self_attn"]):
        assert ours.shape == (3, HEADS, 6, 6)
        torch.testing.assert_close(ours, theirs, **TIGHT)
    # a later layer's weights differ from the first layer's: hidden was passed on
    assert not torch.allclose(got["self_attn"][0], got["self_attn"][2])


@pytest.mark.parametrize("norm_first, activation", [(False, "gelu"), (True, "relu")])
def test_stack_attention_weights_are_nn_transformer_decoders_per_head_weights(norm_first, activation, gen):
    layer = nn.TransformerDecoderLayer(**layer_kwargs(norm_first, activation))
    stack = randomized(nn.TransformerDecoder(layer, num_layers=3), seed=8)
    lt, ls = 5, 4
    tgt = torch.randn(3, lt, D_MODEL, generator=gen, dtype=torch.float64)
    memory = torch.randn(3, ls, D_MODEL, generator=gen, dtype=torch.float64)
    tgt_kpm, mem_kpm = ignore_after([5, 2, 4], lt), ignore_after([4, 4, 1], ls)
    expected = torch_attention_weights(stack, lambda: stack(
        tgt, memory, tgt_mask=future(lt), tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=mem_kpm))
    got = stack_attention_weights(tgt, [params_from_torch(each) for each in stack.layers], HEADS,
                                  ~future(lt)[None, None] & ~tgt_kpm[:, None, None, :], memory=memory,
                                  memory_mask=~mem_kpm[:, None, None, :], norm_first=norm_first,
                                  activation=activation)
    assert list(got) == ["self_attn", "cross_attn"]
    for key, shape in (("self_attn", (3, HEADS, lt, lt)), ("cross_attn", (3, HEADS, lt, ls))):
        assert len(expected[key]) == len(got[key]) == 3
        for ours, theirs in zip(got[key], expected[key]):
            assert ours.shape == shape
            torch.testing.assert_close(ours, theirs, **TIGHT)


def test_stack_attention_weights_run_the_real_layers(gen, monkeypatch):
    """The stack is the real encoder_layer / decoder_layer, called once per layer."""
    calls = []
    for name in ("encoder_layer", "decoder_layer"):
        real = getattr(tfmlib.encoder_decoder, name)
        monkeypatch.setattr(tfmlib.encoder_decoder, name,
                            lambda *a, real=real, name=name, **k: calls.append(name) or real(*a, **k))
    enc = [init_encoder_layer_params(8, 16, generator=gen) for _ in range(2)]
    dec = [init_decoder_layer_params(8, 16, generator=gen) for _ in range(3)]
    x, y = torch.randn(2, 5, 8, generator=gen), torch.randn(2, 4, 8, generator=gen)
    stack_attention_weights(x, enc, 2)
    stack_attention_weights(y, dec, 2, memory=x)
    assert calls == ["encoder_layer"] * 2 + ["decoder_layer"] * 3


def test_stack_attention_weights_record_no_autograd_graph(gen):
    params = init_encoder_layer_params(8, 16, generator=gen)
    x = torch.randn(2, 5, 8, generator=gen, requires_grad=True)
    (weights,) = stack_attention_weights(x, [params], 2)["self_attn"]
    assert not weights.requires_grad
