"""params_from_torch: PyTorch layers -> the params dicts tfmlib's functions take.

The end-to-end checks (same output as PyTorch) live in test_multihead.py and
test_encoder_decoder.py; here: which tensor goes where, and that they are copies.
"""
import pytest
import torch
from torch import nn

from tfmlib import params_from_torch


def test_mha_params_split_in_proj_into_q_k_v():
    module = nn.MultiheadAttention(6, 2, batch_first=True)
    params = params_from_torch(module)
    w_q, w_k, w_v = module.in_proj_weight.detach()[:6], module.in_proj_weight.detach()[6:12], \
        module.in_proj_weight.detach()[12:]
    assert torch.equal(params["w_q"], w_q) and torch.equal(params["w_k"], w_k)
    assert torch.equal(params["w_v"], w_v)
    assert torch.equal(params["b_k"], module.in_proj_bias.detach()[6:12])
    assert torch.equal(params["w_o"], module.out_proj.weight.detach())
    assert torch.equal(params["b_o"], module.out_proj.bias.detach())


def test_mha_params_without_bias_are_none():
    params = params_from_torch(nn.MultiheadAttention(4, 2, bias=False, batch_first=True))
    assert all(params[name] is None for name in ("b_q", "b_k", "b_v", "b_o"))
    assert params["w_q"].shape == (4, 4)


def test_params_are_detached_copies():
    module = nn.MultiheadAttention(4, 2, batch_first=True)
    params = params_from_torch(module)
    assert not params["w_q"].requires_grad
    params["w_q"].add_(1.0)
    params["b_o"].add_(1.0)
    assert not torch.equal(params["w_q"], module.in_proj_weight.detach()[:4])
    assert torch.all(module.out_proj.bias == 0)


def test_layer_params_take_each_norm_and_linear_from_its_own_module():
    layer = nn.TransformerDecoderLayer(8, 2, dim_feedforward=12, batch_first=True)
    with torch.no_grad():
        for i, norm in enumerate((layer.norm1, layer.norm2, layer.norm3)):
            norm.weight.fill_(i + 2.0)
            norm.bias.fill_(-i - 2.0)
    params = params_from_torch(layer)
    for i, name in enumerate(("norm1", "norm2", "norm3")):
        assert torch.all(params[name]["gamma"] == i + 2.0)
        assert torch.all(params[name]["beta"] == -i - 2.0)
    assert torch.equal(params["ffn"]["w_1"], layer.linear1.weight.detach())  # (d_ff, D)
    assert params["ffn"]["w_1"].shape == (12, 8) and params["ffn"]["w_2"].shape == (8, 12)
    assert torch.equal(params["cross_attn"]["w_o"], layer.multihead_attn.out_proj.weight.detach())
    assert torch.equal(params["self_attn"]["w_o"], layer.self_attn.out_proj.weight.detach())


def test_encoder_layer_keys():
    params = params_from_torch(nn.TransformerEncoderLayer(8, 2, dim_feedforward=12, batch_first=True))
    assert set(params) == {"self_attn", "ffn", "norm1", "norm2"}


@pytest.mark.parametrize("module", [nn.Linear(3, 3), nn.LayerNorm(3)])
def test_unsupported_module_is_a_type_error_naming_it(module):
    with pytest.raises(TypeError, match=type(module).__name__):
        params_from_torch(module)


def test_mha_with_different_kdim_is_rejected():
    module = nn.MultiheadAttention(4, 2, kdim=3, vdim=3, batch_first=True)
    with pytest.raises(ValueError, match="kdim"):
        params_from_torch(module)
