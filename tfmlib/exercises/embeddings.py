"""Exercises of notebook 03: embedding lookup, sinusoidal positions, and RoPE."""
from __future__ import annotations

import math

import torch

from .. import embeddings as emb
from ..embeddings import add_positional_encoding, apply_rope, embed, sinusoidal_positional_encoding
from .core import Case, Contract, Exercise, Mistake, register


# ---- embed ------------------------------------------------------------------------------------

def _ids_and_table(g, batch, length, vocab_size, d_model):
    return (torch.randint(0, vocab_size, (batch, length), generator=g), torch.randn(vocab_size, d_model, generator=g))


def _embed_cases() -> list[Case]:
    g = torch.Generator().manual_seed(3)
    return [
        Case("(B, L) ids, (V, D) table", _ids_and_table(g, 2, 5, 11, 6)),
        Case("odd d_model, L = 1", _ids_and_table(g, 3, 1, 7, 9)),
        Case("one sentence, D = 16", _ids_and_table(g, 1, 4, 20, 16)),
        Case("a vocabulary of 2 words", _ids_and_table(g, 2, 3, 2, 8)),
        Case("scale=False: the plain lookup", _ids_and_table(g, 2, 3, 5, 4), {"scale": False}),
    ]


def _embedder(factor, *, always=False):
    def variant(token_ids, table, scale=True):
        vectors = table[token_ids]
        return vectors * factor(table) if (scale or always) else vectors
    return variant


def _table_scaled_in_place(token_ids, table, scale=True):
    if scale:
        table *= math.sqrt(table.size(1))
    return table[token_ids]


register(Exercise(
    name="embed",
    contract=Contract(axes={"B": {"token_ids": (0,)}, "L": {"token_ids": (1,)},
                              "D": {"table": (1,)}}, wide=("D",)),
    reference=embed,
    make_cases=_embed_cases,
    gradients=True,    # the table is trained through this lookup
    mistakes=[
        Mistake("divided by sqrt(d_model) instead of multiplied",
                "embeddings are scaled UP: multiply by math.sqrt(d_model) (it is attention scores that "
                "are divided by sqrt(d_k))",
                _embedder(lambda table: 1 / math.sqrt(table.size(1)))),
        Mistake("no scaling",
                "multiply the looked-up rows by math.sqrt(d_model) when scale is True (GPT-2 and BERT "
                "do without it; the original Transformer, which this course follows, has it)",
                _embedder(lambda table: 1.0)),
        Mistake("multiplied by d_model instead of sqrt(d_model)",
                "the factor is the square root: math.sqrt(d_model)",
                _embedder(lambda table: table.size(1))),
        Mistake("d_model read from the vocabulary axis",
                "the table is (vocab_size, d_model): d_model is table.size(1) (or table.size(-1))",
                _embedder(lambda table: math.sqrt(table.size(0)))),
        Mistake("scale=False ignored",
                "only multiply by sqrt(d_model) when scale is True; scale=False is the plain lookup",
                _embedder(lambda table: math.sqrt(table.size(1)), always=True)),
        Mistake("the embedding table scaled in place",
                "`table *= math.sqrt(d_model)` rescales the model's own table at every call: scale the "
                "looked-up rows instead, table[token_ids] * math.sqrt(d_model)",
                _table_scaled_in_place),
    ],
))


# ---- sinusoidal_positional_encoding ------------------------------------------------------------

def _pe_cases() -> list[Case]:
    return [Case(f"max_len={max_len}, d_model={d_model}", (max_len, d_model))
            for max_len, d_model in ((7, 6), (12, 10), (5, 16), (50, 4), (9, 8), (3, 2), (1, 6))]


def _pe(*, exponent=lambda i, d: 2 * i / d, angle=None, swap=False, halves=False, first_position=0,
        batch_axis=False):
    """A sinusoidal encoding built like a learner might, with one thing changed."""
    def variant(max_len, d_model):
        pos = torch.arange(first_position, first_position + max_len, dtype=torch.float64)[:, None]
        i = torch.arange(d_model // 2, dtype=torch.float64)
        theta = pos / 10000.0 ** exponent(i, d_model) if angle is None else angle(pos, i, d_model)  # (L, D/2)
        first, second = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
        if halves:
            pe = torch.cat([first(theta), second(theta)], dim=-1)
        else:
            pe = torch.stack([first(theta), second(theta)], dim=-1).flatten(-2)  # interleaved
        pe = pe.float()
        return pe[None] if batch_axis else pe
    return variant


# Sizes a learner may have hard-coded (the notebook's, the paper's, ...), besides 512.
_COMMON_D_MODELS = (4, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 128, 256, 768, 1024)


def _fixed_d_model(d_fixed):
    return _pe(exponent=lambda i, d: 2 * i / d_fixed)


# fairseq and tensor2tensor: [sin | cos] halves, frequencies spaced by log(10000) / (D/2 - 1);
# fairseq divides by zero at d_model = 2 (a ZeroDivisionError), tensor2tensor by max(D/2 - 1, 1).
_FAIRSEQ = _pe(exponent=lambda i, d: i * (1 / (d // 2 - 1)), halves=True)
_TENSOR2TENSOR = _pe(exponent=lambda i, d: i / max(d // 2 - 1, 1), halves=True)


register(Exercise(
    name="sinusoidal_positional_encoding",
    contract=Contract(axes={"L": {"max_len": ()}, "D": {"d_model": ()}}, wide=("D",), float64=False,
                      base=5),  # d_model 2, one frequency (1): a float32 answer stays exact past 5000 rows
    reference=sinusoidal_positional_encoding,
    make_cases=_pe_cases,
    atol=1e-4,
    mistakes=[
        Mistake("frequency term fixed for one d_model",
                "divide by the d_model argument in the exponent, base ** (-2i / d_model); a number "
                "that happens to work for one size is wrong for every other",
                _fixed_d_model(512), also=tuple(_fixed_d_model(d) for d in _COMMON_D_MODELS)),
        Mistake("sin and cos swapped",
                "sin goes in the even columns (0, 2, 4, ...), cos in the odd ones: row 0 is [0, 1, 0, 1, ...]",
                _pe(swap=True)),
        Mistake("positions and dimensions swapped",
                "the angle is pos / base ** (2i / d_model): the position is divided, the column index is "
                "in the exponent",
                _pe(angle=lambda pos, i, d: i / 10000.0 ** (2 * pos / d))),
        Mistake("i instead of 2i in the exponent",
                "pair i uses the exponent 2i / d_model: torch.arange(0, d_model, 2) / d_model",
                _pe(exponent=lambda i, d: i / d)),
        Mistake("2i doubled in the exponent",
                "torch.arange(0, d_model, 2) already gives 2i; do not multiply it by 2 again",
                _pe(exponent=lambda i, d: 4 * i / d)),
        Mistake("exponent sign flipped",
                "frequencies fall with i: pos * base ** (-2i / d_model), i.e. pos / base ** (2i / d_model)",
                _pe(exponent=lambda i, d: -2 * i / d)),
        Mistake("sin and cos in two halves instead of interleaved",
                "fill the columns alternately: pe[:, 0::2] = sin, pe[:, 1::2] = cos (torch.cat gives the "
                "[sin | cos] halves of fairseq and tensor2tensor, not the paper's layout)",
                _pe(halves=True)),
        Mistake("the fairseq / tensor2tensor encoding instead of the paper's",
                "those libraries put all sines, then all cosines, at pos * exp(-i * log(10000) / (D/2 - 1)); "
                "the paper's interleaves them at pos / 10000 ** (2i / d_model)",
                _FAIRSEQ, also=(_TENSOR2TENSOR,)),
        Mistake("positions counted from 1",
                "the first position is 0: torch.arange(max_len)",
                _pe(first_position=1)),
        Mistake("an extra batch axis",
                "return (max_len, d_model); the batch axis comes in by broadcasting when it is added to x",
                _pe(batch_axis=True)),
    ],
))


# ---- add_positional_encoding -------------------------------------------------------------------

def _add_cases() -> list[Case]:
    g = torch.Generator().manual_seed(4)
    pe_16x6 = sinusoidal_positional_encoding(16, 6)
    pe_3x6 = sinusoidal_positional_encoding(3, 6)
    return [
        Case("(B, L, D) with a longer pe", (torch.randn(3, 5, 6, generator=g), pe_16x6)),
        Case("one sentence (B = 1)", (torch.randn(1, 7, 6, generator=g), pe_16x6)),
        Case("pe exactly L rows long, fewer than B", (torch.randn(4, 3, 6, generator=g), pe_3x6)),
        Case("L = 1", (torch.randn(4, 1, 6, generator=g), pe_16x6)),
    ]


def _added_in_place(x, pe):
    x += pe[: x.size(1)]
    return x


register(Exercise(
    name="add_positional_encoding",
    contract=Contract(axes={"B": {"x": (0,)}, "L": {"x": (1,), "pe": (0,)},
                                                "D": {"x": (-1,), "pe": (-1,)}}, wide=("D",), base=2),
    reference=add_positional_encoding,
    make_cases=_add_cases,
    gradients=True,    # x comes from the embedding table, and a learned pe is trained too
    mistakes=[
        Mistake("pe not sliced to the sequence length",
                "pe has max_len rows; add only the first L of them: x + pe[:x.size(1)]",
                lambda x, pe: x + pe),
        Mistake("pe sliced with the batch size",
                "x is (B, L, D): the length is x.size(1), not x.size(0)",
                lambda x, pe: x + pe[: x.size(0)]),
        Mistake("the last L rows of pe instead of the first",
                "position 0 is row 0 of pe: slice pe[:L], not pe[-L:]",
                lambda x, pe: x + pe[-x.size(1):]),
        Mistake("pe sliced on the wrong axis",
                "pe is (max_len, D): cut the rows, pe[:L], not the columns, pe[:, :L]",
                lambda x, pe: x + pe[:, : x.size(1)]),
        Mistake("concatenated instead of added",
                "positions are ADDED to the embeddings, giving the same (B, L, D) shape",
                lambda x, pe: torch.cat([x, pe[: x.size(1)].expand_as(x)], dim=-1)),
        Mistake("x changed in place (x += pe)",
                "`x += pe[:L]` overwrites the caller's embeddings: return a new tensor, x + pe[:x.size(1)]",
                _added_in_place),
    ],
))


# ---- apply_rope -------------------------------------------------------------------------------

def _rope_cases() -> list[Case]:
    g = torch.Generator().manual_seed(6)
    return [
        Case("(L, D)", (torch.randn(5, 4, generator=g),)),
        Case("(B, L, D), D = 10", (torch.randn(2, 7, 10, generator=g),)),
        Case("(B, H, L, D) with B != L", (torch.randn(3, 2, 6, 8, generator=g),)),
        Case("positions given (an offset of 4)", (torch.randn(2, 3, 6, generator=g),),
             {"positions": torch.arange(4, 7)}),
        Case("one position, one pair (L = 1, D = 2)", (torch.randn(3, 1, 2, generator=g),)),
        Case("the first case's L with another D: nothing kept by L alone", (torch.randn(5, 8, generator=g),)),
        # by hand: tiling L repeats the given positions, so no derived case goes past a table
        Case("float16 inputs at positions 10000 and on (past a 4096- or 8192-row table; float16 angles: radians off)",
             (torch.randn(2, 3, 4, generator=g).half(),), {"positions": torch.arange(10000, 10003)}),
    ]


def _rope(*, pairs="interleaved", sign=1.0, swap=False, exponent=lambda i, d: 2 * i / d,
          angles_per="pair", length_axis=-2):
    def variant(x, positions=None):
        length, dim = x.shape[length_axis], x.shape[-1]
        if positions is None:
            positions = torch.arange(length)
        i = torch.arange(dim // 2, dtype=torch.float64)
        angle = positions.double()[:, None] / 10000.0 ** exponent(i, dim)       # (L, D/2)
        angle = angle.repeat_interleave(2, dim=-1) if angles_per == "pair" else angle.repeat(1, 2)  # or tiled
        if pairs == "interleaved":
            rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
        else:
            half = dim // 2
            rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
            angle = angle if angles_per != "pair" else torch.cat([angle[:, 0::2]] * 2, dim=-1)
        cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
        if swap:
            cos, sin = sin, cos
        return x * cos + sign * rotated * sin
    return variant


def _written_into_x(*, views):
    """The rotation written back into x's even and odd columns: the caller's x is overwritten,
    and when the columns are read through views, the second line reads the first one's result."""
    def variant(x, positions=None):
        length, dim = x.shape[-2:]
        positions = torch.arange(length) if positions is None else positions
        angle = positions.double()[:, None] * 10000.0 ** (-torch.arange(0, dim, 2).double() / dim)
        cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)   # (L, D/2)
        even, odd = (x[..., 0::2], x[..., 1::2]) if views else (x[..., 0::2].clone(), x[..., 1::2].clone())
        x[..., 0::2] = even * cos - odd * sin
        x[..., 1::2] = even * sin + odd * cos
        return x
    return variant


register(Exercise(
    name="apply_rope",
    contract=Contract(axes={"B": {"x": (0,)}, "L": {"x": (-2,), "positions": (0,)},
                                   "D": {"x": (-1,)}}, wide=("D",), base=3),
    reference=apply_rope,
    make_cases=_rope_cases,
    solution_sources=(emb.rotate_half_pairs, apply_rope),
    atol=1e-4,
    gradients=True,    # queries and keys are rotated inside the trained model
    mistakes=[
        Mistake("halves rotated instead of interleaved pairs",
                "that is the GPT-NeoX / Hugging Face layout, x[i] with x[i + D/2]; this course, like the "
                "RoFormer paper and Meta's Llama, rotates neighbouring pairs (x[2i], x[2i+1])",
                _rope(pairs="halves")),
        Mistake("rotation sign flipped",
                "each pair (a, b) turns to (a cos - b sin, a sin + b cos): rotate_half gives (-b, a)",
                _rope(sign=-1.0)),
        Mistake("cos and sin swapped",
                "x is multiplied by cos(angle) and the rotated copy by sin(angle)",
                _rope(swap=True)),
        Mistake("i instead of 2i in the exponent",
                "pair i turns at pos * base ** (-2i / D): torch.arange(0, D, 2) / D",
                _rope(exponent=lambda i, d: i / d)),
        Mistake("angles tiled instead of repeated per pair",
                "both members of pair i share one angle: repeat_interleave(2, dim=-1), not repeat(1, 2)",
                _rope(angles_per="column")),
        Mistake("positions taken from the wrong axis",
                "x is (..., L, D): the length is x.size(-2), not x.size(0) or x.size(1)",
                _rope(length_axis=0), also=(_rope(length_axis=1),)),
        Mistake("positions argument ignored",
                "when positions is given, rotate by those positions, not by 0..L-1 (a decoder generating "
                "one token at a time passes its offset)",
                lambda x, positions=None: _rope()(x)),
        Mistake("x overwritten in place",
                "writing into x[..., 0::2] changes the caller's tensor (and every view read from it): "
                "build a new one, e.g. torch.stack((new_even, new_odd), dim=-1).flatten(-2)",
                _written_into_x(views=False), also=(_written_into_x(views=True),)),
    ],
))
