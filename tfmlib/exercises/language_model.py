"""Exercises of bonus notebook b1: a decoder-only language model.

How each check calls the learner's function:
    decoder_block(x, block, num_heads, mask)  -> (B, L, D)    (mask left out: causal)
    lm_forward(params, ids, config)           -> logits (B, L, V)
    lm_loss(params, ids, config)              -> scalar

block: {"norm1", "attention", "norm2", "ffn"}; params: {"token_embedding", "position_embedding",
"blocks", "final_norm"}, as made by tfmlib.init_lm_params; config: a tfmlib.LMConfig. The
learner may build on tfmlib's layer_norm, multi_head_attention, feed_forward, causal_mask,
embed and linear (and on tfmlib's decoder_block and lm_forward in the later exercises).

The outputs feed training, so every check also compares the gradients that reach x and
every parameter: an answer that detaches a sublayer fails.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..embeddings import embed
from ..language_model import LMConfig, decoder_block, lm_forward, lm_loss
from ..masks import causal_mask
from ..multihead import multi_head_attention
from ..sublayers import feed_forward, layer_norm
from .core import Case, Contract, Exercise, Mistake, _map_tensors, register
from .multihead import causal, padding, random_mha_params
from .sublayers import random_ffn_params, random_norm_params


def random_block(d_model: int, d_ff: int, g: torch.Generator) -> dict:
    return {"norm1": random_norm_params(d_model, g), "attention": random_mha_params(d_model, g),
            "norm2": random_norm_params(d_model, g), "ffn": random_ffn_params(d_model, d_ff, g)}


def random_lm_params(config: LMConfig, g: torch.Generator) -> dict:
    """Every tensor away from its init (positions as large as the tokens), so each one shows."""
    d = config.d_model
    return {"token_embedding": torch.randn(config.vocab_size, d, generator=g) / math.sqrt(d),
            "position_embedding": 0.5 * torch.randn(config.max_len, d, generator=g),
            "blocks": [random_block(d, config.d_ff, g) for _ in range(config.num_layers)],
            "final_norm": random_norm_params(d, g)}


# ---- decoder_block ------------------------------------------------------------------------------

def _block_mask(kind: str, lengths: list[int], length: int):
    if kind == "default (None)":
        return None
    if kind == "causal & padding":
        return causal(length) & padding(lengths, length)
    if kind == "padding only":
        return padding(lengths, length)
    return torch.ones(1, 1, length, length, dtype=torch.bool)


def _block_case(label, g, batch, length, d_model, d_ff, heads, kind, lengths=None, scale=1.0, query_key_scale=1.0,
                dtype=torch.float32):
    x = scale * torch.randn(batch, length, d_model, generator=g)
    mask = _block_mask(kind, lengths or [length] * batch, length)
    block = random_block(d_model, d_ff, g)
    for name in ("w_q", "b_q", "w_k", "b_k"):  # the scores grow as its square
        block["attention"][name] *= query_key_scale
    return Case(f"{label}: (B, L, D) = ({batch}, {length}, {d_model}), heads={heads}, mask: {kind}",
                _map_tensors((x, block, heads), lambda t: t.to(dtype)), {} if mask is None else {"mask": mask})


def _decoder_block_cases() -> list[Case]:
    g = torch.Generator().manual_seed(140)
    return [_block_case("causal by default", g, 2, 6, 12, 20, 3, "default (None)"),
            _block_case("a padded batch", g, 3, 5, 8, 16, 2, "causal & padding", [5, 3, 4]),
            _block_case("a mask with no causal part: used as given", g, 2, 4, 8, 12, 4, "all True"),
            _block_case("padding only: used as given", g, 2, 5, 6, 10, 2, "padding only", [5, 2]),
            _block_case("large inputs", g, 1, 7, 8, 8, 1, "default (None)", scale=3.0),
            # Past 1024 with the default mask (a causal mask kept at a fixed size, GPT-2's 1024 included, shows), made
            # as small as it can be: the contract's longer lengths vary the padded case, over 50 ms here.
            _block_case("past 1024 tokens", g, 1, 1025, 4, 4, 1, "default (None)"),
            # scores far below -1e4 where a key is seen: a fill of -1e4 for the hidden ones shows
            # (float64: in float32 a score of 1e5 is off by 0.004, and a right answer's gradient by 2 %)
            _block_case("float64, scores of +-1e5 (large w_q, w_k)", g, 2, 6, 8, 8, 2, "causal & padding", [6, 2],
                        query_key_scale=100.0, dtype=torch.float64),
            # each token's variance far below LayerNorm's eps (1e-5): eps 1e-6 shows
            _block_case("a nearly constant x (x 1e-4)", g, 2, 5, 8, 12, 2, "default (None)", scale=1e-4)]


def _block_variant(mask_rule="reference", norms=("norm1", "norm2"), post_ln=False, add_back="x",
                   ffn_reads="after attention", in_place=False):
    """The Pre-LN block with one slip. mask_rule: what the attention gets: "reference" (the
    given mask, else causal), "none when not given", "always causal", "upper triangle"."""
    def variant(x, block, num_heads, mask=None):
        length = x.size(1)
        if mask_rule == "always causal" or (mask is None and mask_rule == "reference"):
            mask = causal_mask(length)
        elif mask is None and mask_rule == "upper triangle":
            mask = causal_mask(length).transpose(-2, -1)  # sees the future, not the past

        def norm(t, key):
            return layer_norm(t, block[key]["gamma"], block[key]["beta"])

        def attend(h):
            return multi_head_attention(h, h, h, block["attention"], num_heads, mask)[0]

        if post_ln:
            h = norm(x + attend(x), norms[0])
            return norm(h + feed_forward(h, block["ffn"]), norms[1])
        h = norm(x, norms[0])
        if in_place:
            x += attend(h)                                      # changes the caller's x
            after = x
        else:
            after = (h if add_back == "normed" else x) + attend(h)
        h2 = norm(after if ffn_reads == "after attention" else x, norms[1])
        return (h2 if add_back == "normed" else after) + feed_forward(h2, block["ffn"])
    return variant


register(Exercise(
    name="decoder_block",
    contract=Contract(axes={"B": {"x": (0,), "mask": (0,)},
                                               "L": {"x": (1,), "mask": (-2, -1)}}, base=1),
    reference=decoder_block,
    make_cases=_decoder_block_cases,
    gradients=True,
    mistakes=[
        Mistake("causal mask forgotten",
                "with no mask given, the block must be causal: mask = causal_mask(L), or every "
                "position reads the characters it is meant to predict",
                _block_variant(mask_rule="none when not given")),
        Mistake("causal mask upside down: the future is visible, the past hidden",
                "position i may see keys 0..i: the lower triangle, causal_mask(L) (tril), not triu",
                _block_variant(mask_rule="upper triangle")),
        Mistake("the given mask ignored: always causal",
                "use a mask the caller passes as it is (it may add padding, or be no mask at all); "
                "make the causal one only when mask is None",
                _block_variant(mask_rule="always causal")),
        Mistake("Post-LN instead of Pre-LN",
                "this block is Pre-LN: x = x + attention(LayerNorm(x)), then x = x + FFN(LayerNorm(x)); "
                "the LayerNorm sits inside the branch, the residual path stays untouched",
                _block_variant(post_ln=True)),
        Mistake("the normalised input added back instead of x",
                "the residual path carries x itself: x + attention(LayerNorm(x)), not "
                "LayerNorm(x) + attention(LayerNorm(x))",
                _block_variant(add_back="normed")),
        Mistake("one LayerNorm's parameters used for both sublayers",
                "each sublayer has its own LayerNorm: norm1 before attention, norm2 before the FFN",
                _block_variant(norms=("norm1", "norm1")), also=(_block_variant(norms=("norm2", "norm2")),)),
        Mistake("FFN sublayer fed the block's input x",
                "the FFN reads the stream after the attention's update: h = x + attention(...); "
                "then h + FFN(LayerNorm(h))",
                _block_variant(ffn_reads="input")),
        Mistake("residual added in place to the caller's x",
                "`x += attention(...)` overwrites the tensor the caller passed in: write "
                "`x = x + attention(...)`, a new tensor",
                _block_variant(in_place=True)),
    ],
))


# ---- lm_forward ---------------------------------------------------------------------------------

def _forward_case(label, g, batch, length, config, weight_scale=1.0):
    ids = torch.randint(0, config.vocab_size, (batch, length), generator=g)
    params = random_lm_params(config, g)
    if weight_scale != 1.0:  # every tensor but the final LayerNorm's
        params = {key: value if key == "final_norm" else _map_tensors(value, lambda t: t * weight_scale)
                  for key, value in params.items()}
    return Case(f"{label}: ids (B, L) = ({batch}, {length}), {config}", (params, ids, config))


def _lm_forward_cases() -> list[Case]:
    g = torch.Generator().manual_seed(141)
    return [_forward_case("two blocks", g, 2, 6, LMConfig(11, d_model=8, num_heads=2, d_ff=12,
                                                          num_layers=2, max_len=7)),
            _forward_case("three blocks, every position", g, 3, 5,
                          LMConfig(7, d_model=12, num_heads=3, d_ff=16, num_layers=3, max_len=5)),
            # vocab_size == d_model: a transposed tied output layer runs, and gives other logits
            _forward_case("vocab_size == d_model", g, 2, 4, LMConfig(8, d_model=8, num_heads=4,
                                                                     d_ff=8, num_layers=2, max_len=6)),
            # the final LayerNorm reads a hidden state whose variance is far below eps (1e-5)
            _forward_case("every weight but the final LayerNorm's x 1e-3", g, 2, 5,
                          LMConfig(9, d_model=8, num_heads=2, d_ff=12, num_layers=2, max_len=5), weight_scale=1e-3),
            _forward_case("a context past 64 and past the vocab", g, 1, 70, LMConfig(9, 8, 2, 12, 1, max_len=80))]


def _forward_variant(positions="before the blocks", scale=True, final_norm=True, tied="E^T",
                     blocks="each", mask="causal"):
    def variant(params, ids, config):
        length = ids.size(1)
        table, pe = params["token_embedding"], params["position_embedding"]
        x = embed(ids, table, scale=scale)                                     # (B, L, D)
        if positions == "before the blocks":
            x = x + pe[:length]
        elif positions == "by token id":
            x = x + pe[ids]
        full = torch.ones(1, 1, length, length, dtype=torch.bool)
        for i in range(len(params["blocks"])):
            block = params["blocks"][0 if blocks == "first every time" else i]
            x = decoder_block(x, block, config.num_heads, full if mask == "none" else None)
        if positions == "after the blocks":
            x = x + pe[:length]
        if final_norm:
            x = layer_norm(x, params["final_norm"]["gamma"], params["final_norm"]["beta"])
        return x @ table.T if tied == "E^T" else x @ table
    return variant


register(Exercise(
    name="lm_forward",
    contract=Contract(axes={"B": {"ids": (0,)}, "L": {"ids": (1,)}}),
    reference=lm_forward,
    make_cases=_lm_forward_cases,
    gradients=True,
    mistakes=[
        Mistake("positions added after the blocks",
                "add the position embeddings to the token embeddings, before the first block: "
                "attention itself is blind to order, so the blocks must be told where each token is",
                _forward_variant(positions="after the blocks")),
        Mistake("positions never added",
                "x = embed(ids, token_embedding) + position_embedding[:L]: without positions the "
                "model cannot tell 'dog sees' from 'sees dog' except through the causal mask",
                _forward_variant(positions="none")),
        Mistake("position embeddings looked up by token id",
                "positions are looked up by place, 0..L-1: position_embedding[:L], not position_embedding[ids]",
                _forward_variant(positions="by token id")),
        Mistake("tied output layer transposed the wrong way",
                "the output layer scores each of the V tokens: logits = h @ token_embedding.T, "
                "(B, L, D) @ (D, V); h @ token_embedding only runs when V == D, and gives nonsense",
                _forward_variant(tied="E")),
        Mistake("token embeddings not multiplied by sqrt(d_model)",
                "use embed(ids, token_embedding), which scales by sqrt(D) as in notebook 03",
                _forward_variant(scale=False)),
        Mistake("final LayerNorm forgotten",
                "Pre-LN blocks leave the stream un-normalised: apply params['final_norm'] before the output layer",
                _forward_variant(final_norm=False)),
        Mistake("the first block's params used for every layer",
                "each block has its own params: for block in params['blocks']: x = decoder_block(x, block, ...)",
                _forward_variant(blocks="first every time")),
        Mistake("blocks without the causal mask",
                "the blocks must be causal: decoder_block with mask=None (or causal_mask(L)); a "
                "model that sees the next character learns to copy it and predicts nothing",
                _forward_variant(mask="none")),
    ],
))


# ---- lm_loss ------------------------------------------------------------------------------------

def _lm_loss_cases() -> list[Case]:
    g = torch.Generator().manual_seed(142)
    config = LMConfig(6, d_model=8, num_heads=2, d_ff=12, num_layers=2, max_len=6)
    return [_forward_case("windows of max_len + 1, as many positions as the vocab has ids", g, 3, 7, config),
            _forward_case("shorter windows", g, 2, 4, config),
            _forward_case("one block, 2 tokens: one prediction each", g, 4, 2,
                          LMConfig(5, d_model=6, num_heads=3, d_ff=8, num_layers=1, max_len=3)),
            _forward_case("windows of 71 tokens: a context past 64", g, 1, 71, LMConfig(6, 8, 2, 12, 1, max_len=70))]


def _loss_variant(inputs="ids[:, :-1]", targets="ids[:, 1:]", loss="cross_entropy"):
    slices = {"ids[:, :-1]": lambda ids: ids[:, :-1], "ids[:, 1:]": lambda ids: ids[:, 1:], "ids": lambda ids: ids}

    def variant(params, ids, config):
        logits = lm_forward(params, slices[inputs](ids), config)             # (B, L', V)
        labels = slices[targets](ids)
        flat, flat_labels = logits.reshape(-1, logits.size(-1)), labels.reshape(-1)
        if loss == "softmax first":
            return F.cross_entropy(flat.softmax(dim=-1), flat_labels)
        if loss == "nll on logits":
            return F.nll_loss(flat, flat_labels)
        return F.cross_entropy(flat, flat_labels, reduction="sum" if loss == "sum" else "mean")
    return variant


register(Exercise(
    name="lm_loss",
    contract=Contract(axes={"B": {"ids": (0,)}}, scales={"params": (30.0,)}),  # logits ~1e3: log(softmax) is -inf
    reference=lm_loss,
    make_cases=_lm_loss_cases,
    gradients=True,
    mistakes=[
        Mistake("targets not shifted: each position scored against its own token",
                "the logits at t predict the NEXT token: read ids[:, :-1], score against ids[:, 1:]",
                _loss_variant(targets="ids[:, :-1]"), also=(_loss_variant(inputs="ids", targets="ids"),)),
        Mistake("shifted the wrong way",
                "the model reads ids[:, :-1] and predicts ids[:, 1:], not the other way round",
                _loss_variant(inputs="ids[:, 1:]", targets="ids[:, :-1]")),
        Mistake("softmax applied before cross_entropy",
                "F.cross_entropy takes the raw logits and applies log_softmax itself",
                _loss_variant(loss="softmax first")),
        Mistake("nll_loss on raw logits",
                "F.nll_loss expects log-probabilities: use F.cross_entropy on the logits (or "
                "nll_loss on logits.log_softmax(-1))",
                _loss_variant(loss="nll on logits")),
        Mistake("summed instead of averaged",
                "the loss is the mean over every predicted position, so it does not grow with the "
                "batch or the window (reduction='mean', F.cross_entropy's default)",
                _loss_variant(loss="sum")),
    ],
))
