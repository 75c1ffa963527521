"""Copy the weights of PyTorch's own layers into the params dicts tfmlib's functions take.

With the same numbers in both, "our layer gives exactly PyTorch's output" becomes a check.
"""
from __future__ import annotations

from torch import nn


def _mha_params(module: nn.MultiheadAttention) -> dict:
    if not module._qkv_same_embed_dim:
        raise ValueError("module: expected nn.MultiheadAttention with kdim == vdim == embed_dim")
    w_q, w_k, w_v = module.in_proj_weight.detach().clone().chunk(3)  # each (D, D), (out, in)
    if module.in_proj_bias is not None:
        b_q, b_k, b_v = module.in_proj_bias.detach().clone().chunk(3)
    else:
        b_q = b_k = b_v = None
    out = module.out_proj
    return {"w_q": w_q, "b_q": b_q, "w_k": w_k, "b_k": b_k, "w_v": w_v, "b_v": b_v,
            "w_o": out.weight.detach().clone(),
            "b_o": None if out.bias is None else out.bias.detach().clone()}


def _norm_params(module: nn.LayerNorm) -> dict:
    return {"gamma": module.weight.detach().clone(), "beta": module.bias.detach().clone()}


def _ffn_params(layer) -> dict:
    return {"w_1": layer.linear1.weight.detach().clone(), "b_1": layer.linear1.bias.detach().clone(),
            "w_2": layer.linear2.weight.detach().clone(), "b_2": layer.linear2.bias.detach().clone()}


def params_from_torch(module: nn.Module) -> dict:
    """nn.MultiheadAttention, nn.TransformerEncoderLayer or nn.TransformerDecoderLayer -> params.

    The result feeds `multi_head_attention`, `encoder_layer` or `decoder_layer`.
    """
    if isinstance(module, nn.MultiheadAttention):
        return _mha_params(module)
    if isinstance(module, nn.TransformerEncoderLayer):
        return {"self_attn": _mha_params(module.self_attn), "ffn": _ffn_params(module),
                "norm1": _norm_params(module.norm1), "norm2": _norm_params(module.norm2)}
    if isinstance(module, nn.TransformerDecoderLayer):
        return {"self_attn": _mha_params(module.self_attn),
                "cross_attn": _mha_params(module.multihead_attn), "ffn": _ffn_params(module),
                "norm1": _norm_params(module.norm1), "norm2": _norm_params(module.norm2),
                "norm3": _norm_params(module.norm3)}
    raise TypeError("module: expected nn.MultiheadAttention, nn.TransformerEncoderLayer or "
                    f"nn.TransformerDecoderLayer, got {type(module).__name__}")
