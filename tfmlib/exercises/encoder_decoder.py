"""Exercises of notebook 08: an encoder layer, the encoder stack, a decoder layer (all Post-LN).

How each check calls the learner's function:
    encoder_layer(x, params, num_heads, mask)                               -> (B, L, D)
    encoder(x, layers, num_heads, mask)                                     -> (B, L, D)
    decoder_layer(x, memory, params, num_heads, self_mask, memory_mask)     -> (B, Lt, D)

params: {"self_attn", "ffn", "norm1", "norm2"} (a decoder layer adds "cross_attn" and
"norm3"), as made by tfmlib.init_encoder_layer_params / init_decoder_layer_params;
the masks are bool, True = "may attend". The learner may build on tfmlib's
multi_head_attention, feed_forward, layer_norm and residual_sublayer.

The outputs feed training, so every check also compares the gradients that reach x,
memory and every parameter: an answer that detaches a sublayer fails.
"""
from __future__ import annotations

import torch

from ..encoder_decoder import decoder_layer, encoder, encoder_layer
from ..multihead import multi_head_attention
from ..sublayers import feed_forward, layer_norm
from .core import Case, Contract, Exercise, Mistake, register
from .multihead import causal, padding, random_mha_params
from .sublayers import _post_ln, _pre_ln, random_ffn_params, random_norm_params


def random_encoder_params(d_model: int, d_ff: int, g: torch.Generator) -> dict:
    return {"self_attn": random_mha_params(d_model, g), "ffn": random_ffn_params(d_model, d_ff, g),
            "norm1": random_norm_params(d_model, g), "norm2": random_norm_params(d_model, g)}


def random_decoder_params(d_model: int, d_ff: int, g: torch.Generator) -> dict:
    return {"self_attn": random_mha_params(d_model, g), "cross_attn": random_mha_params(d_model, g),
            "ffn": random_ffn_params(d_model, d_ff, g), "norm1": random_norm_params(d_model, g),
            "norm2": random_norm_params(d_model, g), "norm3": random_norm_params(d_model, g)}


def _sublayer(x, sublayer, norm, pre_ln=False):
    """Post-LN: LayerNorm(x + sublayer(x)); Pre-LN: x + sublayer(LayerNorm(x))."""
    return (_pre_ln if pre_ln else _post_ln)(x, sublayer, norm)


def _pre_ln_mistake(variant) -> Mistake:
    return Mistake("Pre-LN instead of Post-LN", "this layer is Post-LN, as in the 2017 paper: LayerNorm(x + "
                   "sublayer(x)) after each sublayer; Pre-LN, x + sublayer(LayerNorm(x)), is the modern variant",
                   variant)


def _attention(params, num_heads, mask, memory=None):
    """The sublayer h -> attention(h, kv, kv): self-attention, or cross-attention on `memory`."""
    def attend(h):
        kv = h if memory is None else memory
        return multi_head_attention(h, kv, kv, params, num_heads, mask)[0]
    return attend


# ---- encoder_layer ----------------------------------------------------------------------------

def _encoder_layer_cases() -> list[Case]:
    g = torch.Generator().manual_seed(80)
    return [Case("(2, 5, 12), 3 heads, padding mask",
                 (torch.randn(2, 5, 12, generator=g), random_encoder_params(12, 20, g), 3),
                 {"mask": padding([5, 3], 5)}),
            Case("(3, 4, 8), 2 heads, no mask",
                 (torch.randn(3, 4, 8, generator=g), random_encoder_params(8, 16, g), 2)),
            Case("(1, 6, 8), 4 heads, causal mask",
                 (torch.randn(1, 6, 8, generator=g), random_encoder_params(8, 12, g), 4),
                 {"mask": causal(6)}),
            _small_spread_case(g)]


def _small_spread_case(g: torch.Generator) -> Case:
    """x and the attention's output both tiny: the first LayerNorm sees a variance near eps."""
    params = random_encoder_params(4, 6, g)
    for name in ("w_o", "b_o"):
        params["self_attn"][name] = 1e-3 * params["self_attn"][name]
    return Case("(2, 5, 4), 2 heads, x of spread 1e-3: eps inside the LayerNorm shows",
                (1e-3 * torch.randn(2, 5, 4, generator=g), params, 2), {"mask": padding([5, 3], 5)})


def _encoder_layer_variant(pass_mask=True, norms=("norm1", "norm2"), ffn_reads="h", residual="h",
                           order="attention first", pre_ln=False):
    """The encoder layer with one slip: `ffn_reads` / `residual` say what the FFN sublayer
    reads and adds back ("h", the attention sublayer's output, or "x")."""
    def variant(x, params, num_heads, mask=None):
        attention = _attention(params["self_attn"], num_heads, mask if pass_mask else None)

        def ffn(h):
            return feed_forward(h, params["ffn"])

        first, second = (attention, ffn) if order == "attention first" else (ffn, attention)
        h = _sublayer(x, first, params[norms[0]], pre_ln)
        if pre_ln:
            return _sublayer(h, second, params[norms[1]], pre_ln)
        inputs, norm = {"h": h, "x": x}, params[norms[1]]
        return layer_norm(inputs[residual] + second(inputs[ffn_reads]), norm["gamma"], norm["beta"])
    return variant


def _encoder_layer_in_place(x, params, num_heads, mask=None):
    x += _attention(params["self_attn"], num_heads, mask)(x)  # changes the caller's x
    h = layer_norm(x, params["norm1"]["gamma"], params["norm1"]["beta"])
    return _sublayer(h, lambda h: feed_forward(h, params["ffn"]), params["norm2"])


register(Exercise(
    name="encoder_layer",
    contract=Contract(axes={"B": {"x": (0,), "mask": (0,)},
                                               "L": {"x": (1,), "mask": (-1,)}}),
    reference=encoder_layer,
    make_cases=_encoder_layer_cases,
    gradients=True,
    mistakes=[
        Mistake("mask not passed to self-attention",
                "hand the layer's mask to the attention: multi_head_attention(x, x, x, ..., num_heads, mask)",
                _encoder_layer_variant(pass_mask=False)),
        Mistake("one LayerNorm's parameters used for both sublayers",
                "each sublayer has its own LayerNorm: norm1 after attention, norm2 after the FFN",
                _encoder_layer_variant(norms=("norm1", "norm1")),
                also=(_encoder_layer_variant(norms=("norm2", "norm2")),)),
        Mistake("FFN sublayer fed the original x",
                "the FFN reads the attention sublayer's output h, and adds back h: LayerNorm(h + FFN(h))",
                _encoder_layer_variant(ffn_reads="x", residual="x"),
                also=(_encoder_layer_variant(ffn_reads="x"),)),
        Mistake("sublayers in the wrong order (FFN first)",
                "self-attention comes first, then the FFN",
                _encoder_layer_variant(order="ffn first")),
        _pre_ln_mistake(_encoder_layer_variant(pre_ln=True)),
        Mistake("residual added in place to the caller's x",
                "`x += attention(...)` overwrites the tensor the caller passed in: write "
                "`h = x + attention(...)`, a new tensor",
                _encoder_layer_in_place),
    ],
))


# ---- encoder ----------------------------------------------------------------------------------

def _encoder_cases() -> list[Case]:
    g = torch.Generator().manual_seed(81)

    # Stacks of 3 and 4: with only 2 layers, skipping the first layer looks like feeding every
    # layer x, and skipping the last like returning inside the loop.
    def layers(count, d_model, d_ff):
        return [random_encoder_params(d_model, d_ff, g) for _ in range(count)]

    return [Case("3 layers, (2, 5, 8), 2 heads, padding mask",
                 (torch.randn(2, 5, 8, generator=g), layers(3, 8, 12), 2), {"mask": padding([5, 2], 5)}),
            Case("4 layers, (3, 4, 12), 3 heads, no mask",
                 (torch.randn(3, 4, 12, generator=g), layers(4, 12, 16), 3))]


def _encoder_variant(order=list, reads="hidden", pass_mask=True, layer=encoder_layer):
    """encoder with one classic mistake: the layers `order(layers)` (a slice, reversed, the first
    params every time), each reading the running hidden state or the original x."""
    def variant(x, layers, num_heads, mask=None):
        hidden = x
        for params in order(layers):
            hidden = layer(x if reads == "x" else hidden, params, num_heads, mask if pass_mask else None)
        return hidden
    return variant


register(Exercise(
    name="encoder",
    contract=Contract(axes={"B": {"x": (0,), "mask": (0,)}, "L": {"x": (1,), "mask": (-1,)}}),
    reference=encoder,
    make_cases=_encoder_cases,
    gradients=True,
    mistakes=[
        Mistake("every layer fed the original x",
                "pass the running hidden state on: hidden = layer(hidden, ...), not layer(x, ...)",
                _encoder_variant(reads="x")),
        Mistake("return inside the loop: only the first layer ran",
                "indent `return hidden` out of the for loop, so that every layer runs",
                _encoder_variant(order=lambda layers: layers[:1])),
        Mistake("skips the last layer",
                "run every layer: `for params in layers:` (range(len(layers) - 1) and layers[:-1] stop one short)",
                _encoder_variant(order=lambda layers: layers[:-1])),
        Mistake("skips the first layer",
                "run every layer, layers[0] included: `for params in layers:`, not layers[1:]",
                _encoder_variant(order=lambda layers: layers[1:])),
        Mistake("layers applied in reverse order",
                "apply the layers in list order: layers[0] first",
                _encoder_variant(order=lambda layers: layers[::-1])),
        Mistake("the first layer's params used for every layer",
                "each layer has its own params: loop over `layers` and use the params of this iteration",
                _encoder_variant(order=lambda layers: layers[:1] * len(layers))),
        Mistake("mask not passed to the layers",
                "hand the mask to every layer: encoder_layer(hidden, params, num_heads, mask)",
                _encoder_variant(pass_mask=False)),
        Mistake("a layer adds its residual in place to the caller's x",
                "your layer does `x += ...` on the tensor it is given, so the caller's x changes: "
                "write `h = x + ...`, a new tensor",
                _encoder_variant(layer=_encoder_layer_in_place)),
    ],
))


# ---- decoder_layer ----------------------------------------------------------------------------

def _decoder_layer_cases() -> list[Case]:
    g = torch.Generator().manual_seed(82)

    def case(label, batch, lt, ls, d_model, d_ff, heads, tgt_lengths, src_lengths, per_query=False):
        x, memory = torch.randn(batch, lt, d_model, generator=g), torch.randn(batch, ls, d_model, generator=g)
        self_mask = causal(lt) & padding(tgt_lengths, lt)           # (B, 1, Lt, Lt)
        memory_mask = padding(src_lengths, ls) & (causal(ls) if per_query else True)  # (B, 1, 1 or Lt, Ls)
        return Case(label, (x, memory, random_decoder_params(d_model, d_ff, g), heads, self_mask, memory_mask))

    return [case("Lt=5, Ls=7, (B, D) = (2, 12), 3 heads", 2, 5, 7, 12, 20, 3, [5, 4], [7, 3]),
            case("Lt=4, Ls=3, (3, 8), 2 heads", 3, 4, 3, 8, 16, 2, [4, 2, 3], [3, 3, 1]),
            case("Lt = Ls = 6, (2, 8), 4 heads, a memory mask per query", 2, 6, 6, 8, 12, 4, [6, 4], [5, 6], True)]


def _decoder_layer_variant(self_mask_source="self", memory_mask_source="memory",
                           cross_kv="memory", cross_q="hidden", cross_params="cross_attn",
                           norms=("norm1", "norm2", "norm3"), pre_ln=False):
    def variant(x, memory, params, num_heads, self_mask=None, memory_mask=None):
        masks = {"self": self_mask, "memory": memory_mask, "none": None}
        h = _sublayer(x, _attention(params["self_attn"], num_heads, masks[self_mask_source]), params[norms[0]], pre_ln)

        def cross_attention(h):
            kv = memory if cross_kv == "memory" else h
            q = h if cross_q == "hidden" else memory
            return multi_head_attention(q, kv, kv, params[cross_params], num_heads, masks[memory_mask_source])[0]

        h = _sublayer(h, cross_attention, params[norms[1]], pre_ln)
        return _sublayer(h, lambda h: feed_forward(h, params["ffn"]), params[norms[2]], pre_ln)
    return variant


def _decoder_layer_in_place(x, memory, params, num_heads, self_mask=None, memory_mask=None):
    x += _attention(params["self_attn"], num_heads, self_mask)(x)  # changes the caller's x
    h = layer_norm(x, params["norm1"]["gamma"], params["norm1"]["beta"])
    h = _sublayer(h, _attention(params["cross_attn"], num_heads, memory_mask, memory), params["norm2"])
    return _sublayer(h, lambda h: feed_forward(h, params["ffn"]), params["norm3"])


register(Exercise(
    name="decoder_layer",
    contract=Contract(
        axes={"B": {"x": (0,), "memory": (0,), "self_mask": (0,), "memory_mask": (0,)},
              "Lt": {"x": (1,), "self_mask": (-2, -1), "memory_mask": (-2,)},
              "Ls": {"memory": (1,), "memory_mask": (-1,)}}),
    reference=decoder_layer,
    make_cases=_decoder_layer_cases,
    gradients=True,
    mistakes=[
        Mistake("self-attention without the causal self_mask",
                "masked self-attention: pass self_mask (causal & padding) to the decoder's self-attention, "
                "or every position peeks at the tokens it must predict",
                _decoder_layer_variant(self_mask_source="none")),
        # The notebook's own slip: multi_head_attention(h1, h1, h1, ..., tgt_mask); or with memory_mask.
        Mistake("cross-attention keys and values taken from the decoder",
                "in cross-attention only the queries come from the decoder; keys and values are the "
                "encoder's memory, masked with memory_mask: multi_head_attention(h, memory, memory, ...)",
                _decoder_layer_variant(cross_kv="hidden", memory_mask_source="self"),
                also=(_decoder_layer_variant(cross_kv="hidden"),)),
        Mistake("cross-attention queries taken from memory",
                "the decoder asks the questions: queries from the decoder's hidden state, keys and values from memory",
                _decoder_layer_variant(cross_q="memory")),
        Mistake("memory_mask not passed to cross-attention",
                "hide the padded source tokens: pass memory_mask to the cross-attention",
                _decoder_layer_variant(memory_mask_source="none")),
        Mistake("the two masks swapped",
                "self_mask (B, 1, Lt, Lt) goes to self-attention, memory_mask (B, 1, 1, Ls) to cross-attention",
                _decoder_layer_variant(self_mask_source="memory", memory_mask_source="self")),
        Mistake("self-attention weights reused for cross-attention",
                "cross-attention has its own projections: params['cross_attn']",
                _decoder_layer_variant(cross_params="self_attn")),
        Mistake("one LayerNorm's parameters reused for every sublayer",
                "each of the three sublayers has its own LayerNorm: norm1, norm2, norm3",
                _decoder_layer_variant(norms=("norm1", "norm1", "norm1")),
                also=(_decoder_layer_variant(norms=("norm1", "norm2", "norm2")),
                      _decoder_layer_variant(norms=("norm1", "norm1", "norm2")))),
        _pre_ln_mistake(_decoder_layer_variant(pre_ln=True)),
        Mistake("residual added in place to the caller's x",
                "`x += self_attention(...)` overwrites the tensor the caller passed in: write "
                "`h = x + self_attention(...)`, a new tensor",
                _decoder_layer_in_place),
    ],
))
