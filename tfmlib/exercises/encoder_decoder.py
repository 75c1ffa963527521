"""Exercises of notebook 08: an encoder layer, the encoder stack, a decoder layer (all Post-LN).

How each check calls the learner's function:
    encoder_layer(x, params, num_heads, mask)                               -> (B, L, D)
    encoder(x, layers, num_heads, mask)                                     -> (B, L, D)
    decoder_layer(x, memory, params, num_heads, self_mask, memory_mask)     -> (B, Lt, D)

params: {"self_attn", "ffn", "norm1", "norm2"} (a decoder layer adds "cross_attn" and
"norm3"), as made by tfmlib.init_encoder_layer_params / init_decoder_layer_params;
the masks are bool, True = "may attend". The learner may build on tfmlib's
multi_head_attention, feed_forward, layer_norm and residual_sublayer.
"""
from __future__ import annotations

import torch

from ..encoder_decoder import decoder_layer, encoder, encoder_layer
from ..multihead import multi_head_attention
from ..sublayers import feed_forward, layer_norm
from .core import Case, Exercise, Mistake, register
from .multihead import causal, padding, random_mha_params
from .sublayers import random_ffn_params, random_norm_params


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_encoder_params(d_model: int, d_ff: int, g: torch.Generator) -> dict:
    return {"self_attn": random_mha_params(d_model, g), "ffn": random_ffn_params(d_model, d_ff, g),
            "norm1": random_norm_params(d_model, g), "norm2": random_norm_params(d_model, g)}


def random_decoder_params(d_model: int, d_ff: int, g: torch.Generator) -> dict:
    return {"self_attn": random_mha_params(d_model, g), "cross_attn": random_mha_params(d_model, g),
            "ffn": random_ffn_params(d_model, d_ff, g), "norm1": random_norm_params(d_model, g),
            "norm2": random_norm_params(d_model, g), "norm3": random_norm_params(d_model, g)}


class ShortList(list):
    """A plain list of layer params that prints as "list of N layer params" in a check's report."""

    def __repr__(self) -> str:
        return f"list of {len(self)} layer params"


def _add_norm(x, update, norm):
    """Post-LN: LayerNorm(x + update)."""
    return layer_norm(x + update, norm["gamma"], norm["beta"])


# ---- encoder_layer ----------------------------------------------------------------------------

def _encoder_layer_cases() -> list[Case]:
    g = _generator(80)
    return [Case("(2, 5, 12), 3 heads, padding mask",
                 (torch.randn(2, 5, 12, generator=g), random_encoder_params(12, 20, g), 3),
                 {"mask": padding([5, 3], 5)}),
            Case("(3, 4, 8), 2 heads, no mask",
                 (torch.randn(3, 4, 8, generator=g), random_encoder_params(8, 16, g), 2)),
            Case("(1, 6, 8), 4 heads, causal mask",
                 (torch.randn(1, 6, 8, generator=g), random_encoder_params(8, 12, g), 4),
                 {"mask": causal(6)})]


def _encoder_layer_variant(pass_mask=True, norms=("norm1", "norm2"), ffn_input="hidden",
                           order="attention first", pre_ln=False):
    def variant(x, params, num_heads, mask=None):
        def attention(h):
            return multi_head_attention(h, h, h, params["self_attn"], num_heads,
                                        mask if pass_mask else None)[0]

        def ffn(h):
            return feed_forward(h, params["ffn"])

        first, second = (attention, ffn) if order == "attention first" else (ffn, attention)
        norm_a, norm_b = params[norms[0]], params[norms[1]]
        if pre_ln:
            h = x + first(layer_norm(x, norm_a["gamma"], norm_a["beta"]))
            return h + second(layer_norm(h, norm_b["gamma"], norm_b["beta"]))
        h = _add_norm(x, first(x), norm_a)
        source = h if ffn_input == "hidden" else x
        return _add_norm(source, second(source), norm_b)
    return variant


register(Exercise(
    name="encoder_layer",
    reference=encoder_layer,
    make_cases=_encoder_layer_cases,
    mistakes=[
        Mistake("mask not passed to self-attention",
                "hand the layer's mask to the attention: multi_head_attention(x, x, x, ..., num_heads, mask)",
                _encoder_layer_variant(pass_mask=False)),
        Mistake("one LayerNorm's parameters used for both sublayers",
                "each sublayer has its own LayerNorm: norm1 after attention, norm2 after the FFN",
                _encoder_layer_variant(norms=("norm1", "norm1")),
                also=(_encoder_layer_variant(norms=("norm2", "norm2")),)),
        Mistake("FFN sublayer fed the original x",
                "the FFN sublayer reads the attention sublayer's output, not x: pass `hidden` on",
                _encoder_layer_variant(ffn_input="x")),
        Mistake("sublayers in the wrong order (FFN first)",
                "self-attention comes first, then the FFN",
                _encoder_layer_variant(order="ffn first")),
        Mistake("Pre-LN instead of Post-LN",
                "this layer is Post-LN, as in the 2017 paper: LayerNorm(x + sublayer(x)) after each sublayer",
                _encoder_layer_variant(pre_ln=True)),
    ],
))


# ---- encoder ----------------------------------------------------------------------------------

def _encoder_cases() -> list[Case]:
    g = _generator(81)

    def layers(count, d_model, d_ff):
        return ShortList(random_encoder_params(d_model, d_ff, g) for _ in range(count))

    return [Case("3 layers, (2, 5, 8), 2 heads, padding mask",
                 (torch.randn(2, 5, 8, generator=g), layers(3, 8, 12), 2), {"mask": padding([5, 2], 5)}),
            Case("2 layers, (3, 4, 12), 3 heads, no mask",
                 (torch.randn(3, 4, 12, generator=g), layers(2, 12, 16), 3))]


def _layer(hidden, params, num_heads, mask):
    return encoder_layer(hidden, params, num_heads, mask)


def _encoder_every_layer_reads_x(x, layers, num_heads, mask=None):
    hidden = x
    for params in layers:
        hidden = _layer(x, params, num_heads, mask)
    return hidden


def _encoder_returns_in_loop(x, layers, num_heads, mask=None):
    hidden = x
    for params in layers:
        hidden = _layer(hidden, params, num_heads, mask)
        return hidden


def _encoder_reversed(x, layers, num_heads, mask=None):
    hidden = x
    for params in reversed(layers):
        hidden = _layer(hidden, params, num_heads, mask)
    return hidden


def _encoder_first_params_every_time(x, layers, num_heads, mask=None):
    hidden = x
    for _ in layers:
        hidden = _layer(hidden, layers[0], num_heads, mask)
    return hidden


def _encoder_no_mask(x, layers, num_heads, mask=None):
    hidden = x
    for params in layers:
        hidden = _layer(hidden, params, num_heads, None)
    return hidden


register(Exercise(
    name="encoder",
    reference=encoder,
    make_cases=_encoder_cases,
    mistakes=[
        Mistake("every layer fed the original x",
                "pass the running hidden state on: hidden = layer(hidden, ...), not layer(x, ...)",
                _encoder_every_layer_reads_x),
        Mistake("return inside the loop: only the first layer ran",
                "indent `return hidden` out of the for loop, so that every layer runs",
                _encoder_returns_in_loop),
        Mistake("layers applied in reverse order",
                "apply the layers in list order: layers[0] first",
                _encoder_reversed),
        Mistake("the first layer's params used for every layer",
                "each layer has its own params: loop over `layers` and use the params of this iteration",
                _encoder_first_params_every_time),
        Mistake("mask not passed to the layers",
                "hand the mask to every layer: encoder_layer(hidden, params, num_heads, mask)",
                _encoder_no_mask),
    ],
))


# ---- decoder_layer ----------------------------------------------------------------------------

def _decoder_layer_cases() -> list[Case]:
    g = _generator(82)

    def case(label, batch, lt, ls, d_model, d_ff, heads, tgt_lengths, src_lengths):
        x, memory = torch.randn(batch, lt, d_model, generator=g), torch.randn(batch, ls, d_model, generator=g)
        self_mask = causal(lt) & padding(tgt_lengths, lt)           # (B, 1, Lt, Lt)
        memory_mask = padding(src_lengths, ls)                      # (B, 1, 1, Ls)
        return Case(label, (x, memory, random_decoder_params(d_model, d_ff, g), heads, self_mask, memory_mask))

    return [case("Lt=5, Ls=7, (B, D) = (2, 12), 3 heads", 2, 5, 7, 12, 20, 3, [5, 4], [7, 3]),
            case("Lt=4, Ls=3, (3, 8), 2 heads", 3, 4, 3, 8, 16, 2, [4, 2, 3], [3, 3, 1]),
            case("Lt = Ls = 6, (2, 8), 4 heads", 2, 6, 6, 8, 12, 4, [6, 4], [5, 6])]


def _decoder_layer_variant(self_mask_source="self", memory_mask_source="memory",
                           cross_kv="memory", cross_q="hidden", cross_params="cross_attn",
                           norms=("norm1", "norm2", "norm3")):
    def variant(x, memory, params, num_heads, self_mask=None, memory_mask=None):
        masks = {"self": self_mask, "memory": memory_mask, "none": None}
        h = _add_norm(x, multi_head_attention(x, x, x, params["self_attn"], num_heads,
                                              masks[self_mask_source])[0], params[norms[0]])
        kv = memory if cross_kv == "memory" else h
        q = h if cross_q == "hidden" else memory
        h = _add_norm(h, multi_head_attention(q, kv, kv, params[cross_params], num_heads,
                                              masks[memory_mask_source])[0], params[norms[1]])
        return _add_norm(h, feed_forward(h, params["ffn"]), params[norms[2]])
    return variant


register(Exercise(
    name="decoder_layer",
    reference=decoder_layer,
    make_cases=_decoder_layer_cases,
    mistakes=[
        Mistake("self-attention without the causal self_mask",
                "masked self-attention: pass self_mask (causal & padding) to the decoder's self-attention, "
                "or every position peeks at the tokens it must predict",
                _decoder_layer_variant(self_mask_source="none")),
        Mistake("cross-attention keys and values taken from the decoder",
                "in cross-attention only the queries come from the decoder; keys and values are the "
                "encoder's memory: multi_head_attention(h, memory, memory, ...)",
                _decoder_layer_variant(cross_kv="hidden")),
        Mistake("cross-attention queries taken from memory",
                "the decoder asks the questions: queries from the decoder's hidden state, keys and "
                "values from memory",
                _decoder_layer_variant(cross_q="memory")),
        Mistake("memory_mask not passed to cross-attention",
                "hide the padded source tokens: pass memory_mask to the cross-attention",
                _decoder_layer_variant(memory_mask_source="none")),
        Mistake("the two masks swapped",
                "self_mask (B, 1, Lt, Lt) goes to self-attention, memory_mask (B, 1, 1, Ls) to "
                "cross-attention",
                _decoder_layer_variant(self_mask_source="memory", memory_mask_source="self")),
        Mistake("self-attention weights reused for cross-attention",
                "cross-attention has its own projections: params['cross_attn']",
                _decoder_layer_variant(cross_params="self_attn")),
        Mistake("one LayerNorm's parameters reused for every sublayer",
                "each of the three sublayers has its own LayerNorm: norm1, norm2, norm3",
                _decoder_layer_variant(norms=("norm1", "norm1", "norm1")),
                also=(_decoder_layer_variant(norms=("norm1", "norm2", "norm2")),
                      _decoder_layer_variant(norms=("norm1", "norm1", "norm2")))),
    ],
))
