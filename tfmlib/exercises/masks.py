"""Exercises of notebook 04: padding, causal and combined masks (bool, True = may attend)."""
from __future__ import annotations

import torch

from ..masks import causal_mask, padding_mask, target_mask
from .core import Case, Contract, Exercise, Mistake, register


def _ids(lengths, max_len, pad_id, generator):
    """(B, L) ids: row b has lengths[b] real tokens (ids that are never pad_id), then padding."""
    ids = torch.randint(0, 9, (len(lengths), max_len), generator=generator)
    ids[ids == pad_id] = pad_id + 1                      # no real token equals the pad id
    ids[torch.arange(max_len)[None, :] >= torch.tensor(lengths)[:, None]] = pad_id
    return ids


def _batch_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    ids_a = _ids([5, 3], 5, 0, g)
    ids_b = _ids([3, 1, 2], 3, 0, g)                      # B == L
    ids_c = _ids([6, 2, 4, 0], 6, 1, g)                   # pad id 1, real id 0, a row of padding only
    ids_c[0, 0] = 0
    ids_d = _ids([4], 4, 0, g)
    return [
        Case("two sentences, one padded", (ids_a, 0)),
        Case("B == L", (ids_b, 0)),
        Case("pad_id 1, a real id 0, a row of padding only", (ids_c, 1)),
        Case("one sentence, no padding", (ids_d, 0)),
    ]


def _as(dtype, fn):
    return lambda *args: fn(*args).to(dtype)


_NOT_BOOL_HINT = ("make the mask bool (the comparison `!=` or torch.ones(..., dtype=torch.bool) already "
                  "is): masked_fill needs bool, True = may attend")


# ---- padding_mask -----------------------------------------------------------------------------

def _pad_query_axis(token_ids, pad_id):
    return (token_ids != pad_id)[:, None, :, None]


register(Exercise(
    name="padding_mask",
    contract=Contract(axes={"B": {"token_ids": (0,)}, "L": {"token_ids": (1,)}}),
    reference=padding_mask,
    make_cases=lambda: _batch_cases(41),
    mistakes=[
        Mistake("padding mask on the query axis",
                "padding hides KEYS: the mask must be (B, 1, 1, L), e.g. mask[:, None, None, :], not (B, 1, L, 1)",
                _pad_query_axis),
        Mistake("polarity inverted",
                "True means 'may attend' here (as in F.scaled_dot_product_attention, while "
                "nn.MultiheadAttention reads True as blocked): real tokens are True, token_ids != pad_id",
                lambda token_ids, pad_id: (token_ids == pad_id)[:, None, None, :]),
        Mistake("PyTorch's key_padding_mask instead of this course's mask",
                "nn.MultiheadAttention's key_padding_mask is (B, L) and True on padding; here True means "
                "'may attend', shaped (B, 1, 1, L): (token_ids != pad_id)[:, None, None, :]",
                lambda token_ids, pad_id: token_ids == pad_id),
        Mistake("Hugging Face's attention_mask instead of this course's mask",
                "Hugging Face's attention_mask is (B, L) of 1s and 0s; here the mask is bool and (B, 1, 1, L), "
                "to broadcast onto the scores: (token_ids != pad_id)[:, None, None, :]",
                lambda token_ids, pad_id: (token_ids != pad_id).long()),
        Mistake("not reshaped to (B, 1, 1, L)",
                "add the head and query axes: (token_ids != pad_id)[:, None, None, :] gives (B, 1, 1, L)",
                lambda token_ids, pad_id: token_ids != pad_id,
                also=(lambda token_ids, pad_id: (token_ids != pad_id)[:, None, :],
                      lambda token_ids, pad_id: (token_ids != pad_id)[None, None])),
        Mistake("pad id hard-coded as 0",
                "compare with the pad_id argument; id 0 is a real token in some vocabularies",
                lambda token_ids, pad_id: (token_ids != 0)[:, None, None, :]),
        Mistake("mask not bool",
                _NOT_BOOL_HINT,
                _as(torch.float32, padding_mask),
                also=(_as(torch.long, padding_mask), _as(torch.int32, padding_mask),
                      _as(torch.uint8, padding_mask))),
    ],
))


# ---- causal_mask ------------------------------------------------------------------------------

def _causal_cases() -> list[Case]:
    return [Case(f"seq_len={n}", (n,)) for n in (5, 1, 2, 7)]


def _triangle(keep):
    def variant(seq_len):
        return keep(torch.ones(seq_len, seq_len, dtype=torch.bool))[None, None]
    return variant


def _additive_mask(seq_len):    # nn.Transformer.generate_square_subsequent_mask(seq_len)
    return torch.full((seq_len, seq_len), float("-inf")).triu(1)


register(Exercise(
    name="causal_mask",
    contract=Contract(axes={"L": {"seq_len": ()}}),
    reference=causal_mask,
    make_cases=_causal_cases,
    mistakes=[
        Mistake("upper triangle: query i sees the future",
                "query i (row) may see keys 0..i (columns): keep the LOWER triangle, torch.tril",
                _triangle(torch.triu)),
        Mistake("diagonal excluded",
                "each token may attend to itself: torch.tril(ones) keeps the diagonal (not tril(..., -1))",
                _triangle(lambda m: m.tril(-1))),
        Mistake("one step into the future",
                "tril(ones, 1) lets query i see key i+1; use tril with the default diagonal 0",
                _triangle(lambda m: m.tril(1))),
        Mistake("polarity inverted (True marks the future)",
                "True means 'may attend' here: the allowed lower triangle is True; triu(ones, diagonal=1) "
                "is nn.MultiheadAttention's convention (True = blocked), so invert it with ~",
                _triangle(lambda m: m.triu(1))),
        Mistake("nn.Transformer's float mask instead of a bool one",
                "generate_square_subsequent_mask gives a float mask ADDED to the scores (0 allowed, -inf "
                "hidden); here the mask is bool, True = may attend: ones(L, L, dtype=torch.bool).tril()",
                _additive_mask, also=(lambda seq_len: _additive_mask(seq_len)[None, None],)),
        Mistake("not reshaped to (1, 1, L, L)",
                "add the batch and head axes: mask[None, None] gives (1, 1, L, L)",
                lambda seq_len: torch.ones(seq_len, seq_len, dtype=torch.bool).tril(),
                also=(lambda seq_len: torch.ones(seq_len, seq_len, dtype=torch.bool).tril()[None],)),
        Mistake("mask not bool",
                _NOT_BOOL_HINT,
                _as(torch.float32, causal_mask),
                also=(_as(torch.long, causal_mask), _as(torch.int32, causal_mask),
                      _as(torch.uint8, causal_mask))),
    ],
))


# ---- target_mask ------------------------------------------------------------------------------

def _target(*, pad=None, causal=None, combine=lambda p, c: p & c):
    def variant(token_ids, pad_id):
        p = padding_mask(token_ids, pad_id) if pad is None else pad(token_ids, pad_id)
        c = causal_mask(token_ids.size(1)) if causal is None else causal(token_ids)
        return combine(p, c)
    return variant


register(Exercise(
    name="target_mask",
    contract=Contract(axes={"B": {"token_ids": (0,)}, "L": {"token_ids": (1,)}}),
    reference=target_mask,
    make_cases=lambda: _batch_cases(43),
    solution_sources=(padding_mask, causal_mask, target_mask),
    mistakes=[
        Mistake("combined with | instead of &",
                "a key is allowed only if it is real AND not in the future: padding & causal",
                _target(combine=lambda p, c: p | c)),
        Mistake("`and` instead of `&`",
                "`and` asks for ONE truth value of a whole tensor; combine elementwise with &",
                _target(combine=lambda p, c: p and c)),
        Mistake("padding on the query axis",
                "the padding part hides keys, (B, 1, 1, L); on the query axis it hides the wrong entries",
                _target(pad=_pad_query_axis)),
        Mistake("causal part missing",
                "combine the padding mask with causal_mask(L): padding & causal gives (B, 1, L, L)",
                _target(combine=lambda p, c: p),
                also=(_target(combine=lambda p, c: p.expand(-1, -1, p.size(-1), -1)),)),
        Mistake("padding part missing",
                "a decoder must not attend to padded keys either: padding & causal",
                _target(combine=lambda p, c: c),
                also=(_target(combine=lambda p, c: c.expand(p.size(0), -1, -1, -1)),)),
        Mistake("causal mask sized by the batch axis",
                "token_ids is (B, L): the causal mask is L x L with L = token_ids.size(1)",
                _target(causal=lambda ids: causal_mask(ids.size(0)))),
        Mistake("polarity inverted",
                "True means 'may attend' here (nn.MultiheadAttention reads True as blocked): real keys "
                "in the past, and on the diagonal, are True",
                _target(combine=lambda p, c: ~(p & c))),
        Mistake("causal part flipped (upper triangle)",
                "the causal part keeps the LOWER triangle: query i sees keys 0..i",
                _target(causal=lambda ids: _triangle(torch.triu)(ids.size(1)))),
        Mistake("causal part excludes the diagonal",
                "each token may attend to itself: tril(ones), not tril(ones, -1)",
                _target(causal=lambda ids: _triangle(lambda m: m.tril(-1))(ids.size(1)))),
    ],
))
