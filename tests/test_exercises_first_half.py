"""The exercise checks of notebooks 01-05 (shapes, tokenization, embeddings, masks, attention).

For every check: the reference passes; other correct implementations (loops,
einsum, torch.where, comprehensions, ...) pass too; every catalogued mistake
variant is caught and named; answers written here the way a learner would
write them are named; crashes, None, wrong shapes, dtypes and NaN are
diagnosed in words; stubs are "not attempted"; and each check is fast.

The learner-style functions live in this file (not in lambdas) so that the
checker can read their source, as it does for a notebook cell.
"""
from __future__ import annotations

import itertools
import math
import time

import pytest
import torch
import torch.nn.functional as F

from tfmlib.exercises import REGISTRY, check

FIRST_HALF = [
    "broadcast_shape",
    "build_vocab", "encode", "decode", "pad_batch",
    "embed", "sinusoidal_positional_encoding", "add_positional_encoding", "apply_rope",
    "padding_mask", "causal_mask", "target_mask",
    "scaled_dot_product_attention",
]
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


def assert_passes(name, fn):
    result = check(name, fn)
    assert result, str(result)
    assert result.status == "passed"
    assert str(result).startswith(f"[PASS] {name}")


def assert_named(name, fn, mistake):
    result = check(name, fn)
    assert not result
    assert result.status == "mistake", str(result)
    assert result.mistake == mistake, str(result)
    assert "hint: " in result.details
    return result


# ==== (b) correct implementations written differently from the reference ======================

# -- broadcast_shape
def broadcast_loop(shape_a, shape_b):
    a, b = list(shape_a), list(shape_b)
    while len(a) < len(b):
        a.insert(0, 1)
    while len(b) < len(a):
        b.insert(0, 1)
    out = []
    for axis in range(len(a)):
        if a[axis] == b[axis] or b[axis] == 1:
            out.append(a[axis])
        elif a[axis] == 1:
            out.append(b[axis])
        else:
            raise ValueError(f"axis {axis - len(a)}: {a[axis]} vs {b[axis]}")
    return tuple(out)


def broadcast_zip_longest(shape_a, shape_b):
    out = []
    for x, y in itertools.zip_longest(reversed(shape_a), reversed(shape_b), fillvalue=1):
        if x != y and 1 not in (x, y):
            raise ValueError(f"sizes {x} and {y} clash")
        out.append(x if y == 1 else y)   # not max(x, y): (0,) with (1,) gives (0,)
    return tuple(reversed(out))


def broadcast_with_torch(shape_a, shape_b):
    """Right, but the notebook says not to call torch.broadcast_shapes: see the test below."""
    try:
        return tuple(torch.broadcast_shapes(tuple(shape_a), tuple(shape_b)))
    except RuntimeError:   # torch's message does not say both sizes: the notebook asks for them
        x, y = next((x, y) for x, y in zip(shape_a[::-1], shape_b[::-1]) if x != y and 1 not in (x, y))
        raise ValueError(f"sizes {x} and {y} clash") from None


# -- build_vocab
def vocab_comprehension(sentences, specials=SPECIALS):
    vocab = {token: i for i, token in enumerate(specials)}
    for sentence in sentences:
        for token in sentence.split():
            if token not in vocab:
                vocab[token] = len(vocab)
    return vocab


def vocab_fromkeys(sentences, specials=SPECIALS):
    tokens = list(specials) + [t for s in sentences for t in s.split()]
    return {token: i for i, token in enumerate(dict.fromkeys(tokens))}


# -- encode
def encode_get(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(token, vocab["<unk>"]) for token in sentence.split()]
    return [vocab["<bos>"]] * add_bos + ids + [vocab["<eos>"]] * add_eos


def encode_loop(sentence, vocab, add_bos=False, add_eos=False):
    ids = []
    if add_bos:
        ids.append(vocab["<bos>"])
    for token in sentence.split():
        if token in vocab:
            ids.append(vocab[token])
        else:
            ids.append(vocab["<unk>"])
    if add_eos:
        ids.append(vocab["<eos>"])
    return ids


# -- decode
def decode_loop(ids, vocab, skip_specials=True):
    id_to_token = {}
    for token, index in vocab.items():
        id_to_token[index] = token
    words = []
    for index in ids:
        token = id_to_token[int(index)]
        if skip_specials and token == "<eos>":
            break
        if skip_specials and token in SPECIALS:
            continue
        words.append(token)
    return " ".join(words)


def decode_slicing(ids, vocab, skip_specials=True):
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    tokens = [{i: t for t, i in vocab.items()}[i] for i in ids]
    if skip_specials:
        if "<eos>" in tokens:
            tokens = tokens[: tokens.index("<eos>")]
        tokens = [t for t in tokens if t not in SPECIALS]
    return " ".join(tokens)


# -- pad_batch
def pad_full_then_fill(id_lists, pad_id, max_len=None):
    length = max_len or max(len(ids) for ids in id_lists)
    batch = torch.full((len(id_lists), length), pad_id, dtype=torch.long)
    for row, ids in enumerate(id_lists):
        for col, token in enumerate(ids[:length]):
            batch[row, col] = token
    return batch


def pad_lists(id_lists, pad_id, max_len=None):
    length = max_len if max_len is not None else max(map(len, id_lists))
    rows = [list(ids[:length]) + [pad_id] * (length - len(ids[:length])) for ids in id_lists]
    return torch.tensor(rows, dtype=torch.long)


def pad_with_pad_sequence(id_lists, pad_id, max_len=None):
    if not id_lists:   # pad_sequence would raise a RuntimeError
        raise ValueError("id_lists: an empty batch has no longest row")
    batch = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(ids, dtype=torch.long) for ids in id_lists], batch_first=True, padding_value=pad_id)
    if max_len is not None:
        batch = F.pad(batch, (0, max(0, max_len - batch.size(1))), value=pad_id)[:, :max_len]
    return batch


# -- embed
def embed_index(token_ids, table, scale=True):
    out = table[token_ids]
    if scale:
        out = out * math.sqrt(table.shape[-1])
    return out


def embed_one_hot(token_ids, table, scale=True):
    one_hot = F.one_hot(token_ids, num_classes=table.size(0)).to(table.dtype)   # (B, L, V)
    factor = table.size(1) ** 0.5 if scale else 1.0
    return (one_hot @ table) * factor


def embed_functional(token_ids, table, scale=True):
    vectors = F.embedding(token_ids, table)
    return vectors * torch.sqrt(torch.tensor(float(table.size(1)))) if scale else vectors


# -- sinusoidal_positional_encoding
def pe_python_loops(max_len, d_model):
    rows = []
    for pos in range(max_len):
        row = []
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            row += [math.sin(angle), math.cos(angle)]
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32).reshape(max_len, d_model)


def pe_exp_log(max_len, d_model):   # the Annotated Transformer's way, in float32
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def pe_stack(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    freq = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    angle = pos * freq
    return torch.stack((angle.sin(), angle.cos()), dim=-1).reshape(max_len, d_model)


# -- add_positional_encoding
def add_pe_slice(x, pe):
    return x + pe[: x.shape[1]]


def add_pe_expand(x, pe):
    batch, length, _ = x.shape
    return x + pe.narrow(0, 0, length).unsqueeze(0).expand(batch, -1, -1)


# -- apply_rope
def rope_complex(x, positions=None):   # Llama's way: pairs as complex numbers
    length, dim = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(length)
    work = torch.promote_types(x.dtype, torch.float32)  # as Llama: no complex half on the CPU
    freqs = 10000.0 ** (-torch.arange(0, dim, 2, dtype=work) / dim)
    angles = positions.to(work)[:, None] * freqs                      # (L, D/2)
    pairs = torch.view_as_complex(x.to(work).reshape(*x.shape[:-1], dim // 2, 2).contiguous())
    rotated = pairs * torch.polar(torch.ones_like(angles), angles)
    return torch.view_as_real(rotated).flatten(-2).to(x.dtype)


def rope_pair_loop(x, positions=None):
    length, dim = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = list(range(length))
    out = x.clone()
    for row, p in enumerate(positions):
        for i in range(dim // 2):
            angle = float(p) * 10000.0 ** (-2 * i / dim)
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[..., row, 2 * i], x[..., row, 2 * i + 1]
            out[..., row, 2 * i] = a * c - b * s
            out[..., row, 2 * i + 1] = a * s + b * c
    return out


# -- padding_mask
def padding_unsqueeze(token_ids, pad_id):
    return (token_ids != pad_id).unsqueeze(1).unsqueeze(2)


def padding_where(token_ids, pad_id):
    batch, length = token_ids.shape
    return torch.where(token_ids == pad_id, False, True).reshape(batch, 1, 1, length)


# -- causal_mask
def causal_tril(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len)).bool().unsqueeze(0).unsqueeze(0)


def causal_arange(seq_len):
    position = torch.arange(seq_len)
    return (position[None, :] <= position[:, None]).view(1, 1, seq_len, seq_len)


def causal_not_triu(seq_len):
    return ~torch.triu(torch.ones(1, 1, seq_len, seq_len, dtype=torch.bool), diagonal=1)


# -- target_mask
def target_from_parts(token_ids, pad_id):
    pad = (token_ids != pad_id)[:, None, None, :]
    causal = torch.ones(token_ids.size(1), token_ids.size(1), dtype=torch.bool).tril()
    return pad & causal


def target_logical_and(token_ids, pad_id):
    batch, length = token_ids.shape
    q = torch.arange(length).view(length, 1)
    k = torch.arange(length).view(1, length)
    allowed = torch.logical_and((token_ids != pad_id).view(batch, 1, 1, length), k <= q)
    return allowed


# -- scaled_dot_product_attention
def attention_einsum(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key) / query.shape[-1] ** 0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf")))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)
    return torch.einsum("...qk,...kv->...qv", weights, value), weights


def attention_masked_rows(query, key, value, mask=None):
    scores = query @ key.transpose(-1, -2) * (1.0 / math.sqrt(key.size(-1)))
    if mask is None:
        weights = scores.softmax(-1)
    else:
        scores = scores.masked_fill(mask.logical_not(), torch.finfo(scores.dtype).min)  # -1e9 overflows float16
        weights = scores.softmax(-1) * mask               # zero where masked
        weights = weights * mask.any(-1, keepdim=True)    # rows with no key at all: zeros
    return torch.matmul(weights, value), weights


CORRECT = {
    "broadcast_shape": [broadcast_loop, broadcast_zip_longest],
    "build_vocab": [vocab_comprehension, vocab_fromkeys],
    "encode": [encode_get, encode_loop],
    "decode": [decode_loop, decode_slicing],
    "pad_batch": [pad_full_then_fill, pad_lists, pad_with_pad_sequence],
    "embed": [embed_index, embed_one_hot, embed_functional],
    "sinusoidal_positional_encoding": [pe_python_loops, pe_exp_log, pe_stack],
    "add_positional_encoding": [add_pe_slice, add_pe_expand],
    "apply_rope": [rope_complex, rope_pair_loop],
    "padding_mask": [padding_unsqueeze, padding_where],
    "causal_mask": [causal_tril, causal_arange, causal_not_triu],
    "target_mask": [target_from_parts, target_logical_and],
    "scaled_dot_product_attention": [attention_einsum, attention_masked_rows],
}


# ==== learner-style wrong answers, written independently of the catalogue's variants ===========

def bs_left(shape_a, shape_b):
    a, b = list(shape_a), list(shape_b)
    a += [1] * (len(b) - len(a))
    b += [1] * (len(a) - len(b))
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError("no broadcast")
        out.append(max(x, y))
    return tuple(out)


def bs_assert(shape_a, shape_b):
    out = []
    for x, y in itertools.zip_longest(shape_a[::-1], shape_b[::-1], fillvalue=1):
        assert x == y or x == 1 or y == 1, "shapes do not broadcast"
        out.append(y if x == 1 else x)
    return tuple(out[::-1])


def vocab_words_first(sentences, specials=SPECIALS):
    vocab = {}
    for sentence in sentences:
        for w in sentence.split():
            if w not in vocab:
                vocab[w] = len(vocab)
    for s in specials:
        vocab[s] = len(vocab)
    return vocab


def vocab_sorted(sentences, specials=SPECIALS):
    words = sorted({w for s in sentences for w in s.split()})
    return {t: i for i, t in enumerate(list(specials) + words)}


def encode_brackets(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab[w] for w in sentence.split()]
    if add_bos:
        ids = [vocab["<bos>"]] + ids
    if add_eos:
        ids = ids + [vocab["<eos>"]]
    return ids


def encode_default_zero(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w, 0) for w in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])


def decode_no_break(ids, vocab, skip_specials=True):
    inv = {v: k for k, v in vocab.items()}
    words = [inv[int(i)] for i in ids]
    if skip_specials:
        words = [w for w in words if w not in ("<pad>", "<bos>", "<eos>", "<unk>")]
    return " ".join(words)


def decode_only_pad_removed(ids, vocab, skip_specials=True):
    inv = {v: k for k, v in vocab.items()}
    out = []
    for i in list(ids):
        word = inv[int(i)]
        if skip_specials and word == "<eos>":
            break
        if skip_specials and word == "<pad>":
            continue
        out.append(word)
    return " ".join(out)


def pad_left(id_lists, pad_id, max_len=None):
    length = max_len or max(len(x) for x in id_lists)
    return torch.tensor([[pad_id] * (length - len(x[:length])) + list(x[:length]) for x in id_lists])


def pad_float_zeros(id_lists, pad_id, max_len=None):
    length = max_len or max(len(x) for x in id_lists)
    batch = torch.zeros(len(id_lists), length) + pad_id
    for r, x in enumerate(id_lists):
        x = x[:length]
        batch[r, : len(x)] = torch.tensor(x)
    return batch


def pad_int32(id_lists, pad_id, max_len=None):
    length = max_len or max(len(x) for x in id_lists)
    batch = torch.full((len(id_lists), length), pad_id, dtype=torch.int)
    for r, x in enumerate(id_lists):
        x = x[:length]
        batch[r, : len(x)] = torch.tensor(x, dtype=torch.int)
    return batch


def embed_divided(token_ids, table, scale=True):
    out = table[token_ids]
    return out / math.sqrt(table.shape[1]) if scale else out


def embed_unscaled(token_ids, table, scale=True):
    return F.embedding(token_ids, table)


def pe_512(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / 512))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def pe_seed_note(max_len, d_model):   # the seed note's 10 ** (-j / 2): right only for d_model = 8
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    div_term = 10 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / 2)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def pe_cos_even(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    pos = torch.arange(max_len).float()[:, None]
    freq = 10000 ** (-torch.arange(0, d_model, 2).float() / d_model)
    pe[:, 0::2] = torch.cos(pos * freq)
    pe[:, 1::2] = torch.sin(pos * freq)
    return pe


def pe_pos_in_exponent(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    pos = torch.arange(max_len).float()[:, None]
    i = torch.arange(d_model // 2).float()[None, :]
    angle = i / torch.pow(10000.0, 2 * pos / d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def pe_i_not_2i(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    pos = torch.arange(max_len).float()[:, None]
    i = torch.arange(d_model // 2).float()
    pe[:, 0::2] = torch.sin(pos / 10000 ** (i / d_model))
    pe[:, 1::2] = torch.cos(pos / 10000 ** (i / d_model))
    return pe


def add_pe_unsliced(x, pe):
    return x + pe


def add_pe_batch_size(x, pe):
    B = x.size(0)
    return x + pe[:B]


def rope_neox(x, positions=None):
    L, D = x.shape[-2:]
    pos = torch.arange(L) if positions is None else positions
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D))
    freqs = torch.outer(pos.float(), inv)
    emb = torch.cat((freqs, freqs), dim=-1)  # cos and sin taken in float32, then cast, as transformers does
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * emb.cos().to(x.dtype) + torch.cat((-x2, x1), dim=-1) * emb.sin().to(x.dtype)


def rope_clockwise(x, positions=None):
    L, D = x.shape[-2:]
    pos = torch.arange(L) if positions is None else positions
    theta = pos.float()[:, None] * 10000 ** (-torch.arange(0, D, 2).float() / D)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * theta.cos() + odd * theta.sin()
    out[..., 1::2] = odd * theta.cos() - even * theta.sin()
    return out


def padding_on_queries(token_ids, pad_id):
    return (token_ids != pad_id).unsqueeze(1).unsqueeze(-1)


def padding_true_is_pad(token_ids, pad_id):
    return (token_ids == pad_id).unsqueeze(1).unsqueeze(1)


def causal_triu(seq_len):
    return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool)).unsqueeze(0).unsqueeze(0)


def causal_strict(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len), diagonal=-1).bool()[None, None]


def causal_seed_triu(seq_len):   # seed 001: triu(diagonal=1) is the mask of what to HIDE
    return torch.triu(torch.ones(seq_len, seq_len), diagonal=1).bool()[None, None]


def target_or(token_ids, pad_id):
    pad = (token_ids != pad_id)[:, None, None, :]
    causal = torch.tril(torch.ones(token_ids.shape[1], token_ids.shape[1])).bool()
    return pad | causal


def target_and_keyword(token_ids, pad_id):
    pad = (token_ids != pad_id)[:, None, None, :]
    causal = torch.tril(torch.ones(token_ids.shape[1], token_ids.shape[1])).bool()
    return pad and causal


def attention_by_d_k(query, key, value, mask=None):
    scores = torch.matmul(query, key.transpose(-2, -1)) / key.shape[-1]
    if mask is not None:
        scores = scores.masked_fill(mask == False, float("-inf"))  # noqa: E712 (learner style)
    p = F.softmax(scores, dim=-1)
    if mask is not None:
        p = p.masked_fill(mask == False, 0.0)  # noqa: E712
    return p @ value, p


LEARNER_MISTAKES = [
    ("broadcast_shape", bs_left, "shapes aligned from the left"),
    ("broadcast_shape", bs_assert, "wrong kind of error on a clash"),
    ("build_vocab", vocab_words_first, "specials not numbered first"),
    ("build_vocab", vocab_sorted, "tokens sorted instead of numbered by first appearance"),
    ("encode", encode_brackets, "KeyError on an unknown token"),
    ("encode", encode_default_zero, "unknown tokens mapped to <pad> (id 0)"),
    ("decode", decode_no_break, "does not stop at <eos>"),
    ("decode", decode_only_pad_removed, "specials not skipped"),
    ("pad_batch", pad_left, "padding on the left"),
    ("pad_batch", pad_float_zeros, "ids not torch.long"),
    ("pad_batch", pad_int32, "ids not torch.long"),
    ("embed", embed_divided, "divided by sqrt(d_model) instead of multiplied"),
    ("embed", embed_unscaled, "no scaling"),
    ("sinusoidal_positional_encoding", pe_512, "frequency term fixed for one d_model"),
    ("sinusoidal_positional_encoding", pe_seed_note, "frequency term fixed for one d_model"),
    ("sinusoidal_positional_encoding", pe_cos_even, "sin and cos swapped"),
    ("sinusoidal_positional_encoding", pe_pos_in_exponent, "positions and dimensions swapped"),
    ("sinusoidal_positional_encoding", pe_i_not_2i, "i instead of 2i in the exponent"),
    ("add_positional_encoding", add_pe_unsliced, "pe not sliced to the sequence length"),
    ("add_positional_encoding", add_pe_batch_size, "pe sliced with the batch size"),
    ("apply_rope", rope_neox, "halves rotated instead of interleaved pairs"),
    ("apply_rope", rope_clockwise, "rotation sign flipped"),
    ("padding_mask", padding_on_queries, "padding mask on the query axis"),
    ("padding_mask", padding_true_is_pad, "polarity inverted"),
    ("causal_mask", causal_triu, "upper triangle: query i sees the future"),
    ("causal_mask", causal_strict, "diagonal excluded"),
    ("causal_mask", causal_seed_triu, "polarity inverted (True marks the future)"),
    ("target_mask", target_or, "combined with | instead of &"),
    ("target_mask", target_and_keyword, "`and` instead of `&`"),
    ("scaled_dot_product_attention", attention_by_d_k, "scores divided by d_k"),
]


# ==== learners whose code crashes, forgets to return, or returns the wrong kind of thing =======

def crashes(*args, **kwargs):
    scale = 1 / 0  # the line the diagnosis must show
    return scale


def returns_none(*args, **kwargs):
    inputs = list(args)   # works on something, then forgets to `return` it


def reference_then(name, change):
    """A learner whose answer is the reference's, then changed by `change`."""
    def learner(*args, **kwargs):
        return change(REGISTRY[name].reference(*args, **kwargs))
    return learner


def _first_tensor(output):
    return output[0] if isinstance(output, tuple) else output


def _replace_first(output, new):
    return (new, *output[1:]) if isinstance(output, tuple) else new


def wider(output):
    t = _first_tensor(output)
    return _replace_first(output, torch.cat([t, t[..., :1]], dim=-1))


def as_double_or_float(output):
    t = _first_tensor(output)
    return _replace_first(output, t.double() if t.is_floating_point() else t.float())


def with_nan(output):
    t = _first_tensor(output).clone()
    t.view(-1)[0] = float("nan")
    return _replace_first(output, t)


TENSOR_OUTPUTS = ["pad_batch", "embed", "sinusoidal_positional_encoding", "add_positional_encoding",
                  "apply_rope", "padding_mask", "causal_mask", "target_mask",
                  "scaled_dot_product_attention"]
FLOAT_OUTPUTS = ["embed", "sinusoidal_positional_encoding", "add_positional_encoding", "apply_rope",
                 "scaled_dot_product_attention"]
PLAIN_OUTPUTS = {   # exercises returning Python values, and a wrong type a learner might return
    "broadcast_shape": (lambda out: torch.Size(out).numel(), "int"),
    "build_vocab": (lambda out: list(out), "list"),
    "encode": (lambda out: torch.tensor(out), "Tensor"),
    "decode": (lambda out: out.split(), "list"),
}


def stub_ellipsis(*args, **kwargs):
    """Docstring, then the placeholder."""
    ...  # your code here


def stub_pass(*args, **kwargs):
    pass


def stub_not_implemented(*args, **kwargs):
    raise NotImplementedError("your code here")


# ==== the tests ===============================================================================

def test_the_first_half_is_registered():
    assert set(FIRST_HALF) <= set(REGISTRY)
    assert sum(len(REGISTRY[name].mistakes) for name in FIRST_HALF) >= 18


def test_torchs_broadcast_shapes_is_right_but_not_the_learners_work():
    result = check("broadcast_shape", broadcast_with_torch)
    assert not result and "`torch.broadcast_shapes`" in result.message, str(result)


@pytest.mark.parametrize("name", FIRST_HALF)
def test_reference_passes_its_own_check(name):
    assert_passes(name, REGISTRY[name].reference)


@pytest.mark.parametrize("name, fn", [(name, fn) for name, fns in CORRECT.items() for fn in fns],
                         ids=lambda value: getattr(value, "__name__", value))
def test_other_correct_implementations_pass(name, fn):
    assert_passes(name, fn)


def test_every_check_has_at_least_two_other_correct_implementations():
    assert set(CORRECT) == set(FIRST_HALF)
    assert all(len(fns) >= 2 for fns in CORRECT.values())


VARIANTS = [(name, mistake.name, index)
            for name in FIRST_HALF for mistake in REGISTRY[name].mistakes
            for index in range(len(mistake.variants))]


@pytest.mark.parametrize("name, mistake, index", VARIANTS)
def test_every_catalogued_variant_is_caught_and_named(name, mistake, index):
    entry = next(m for m in REGISTRY[name].mistakes if m.name == mistake)
    assert_named(name, entry.variants[index], mistake)


def test_catalogued_mistakes_of_an_exercise_have_distinct_names():
    for name in FIRST_HALF:
        names = [m.name for m in REGISTRY[name].mistakes]
        assert len(names) == len(set(names)), name


@pytest.mark.parametrize("name, fn, mistake", LEARNER_MISTAKES,
                         ids=[fn.__name__ for _, fn, _ in LEARNER_MISTAKES])
def test_learner_style_wrong_answers_are_named(name, fn, mistake):
    assert_named(name, fn, mistake)


def test_every_check_has_a_learner_style_wrong_answer():
    assert {name for name, _, _ in LEARNER_MISTAKES} == set(FIRST_HALF)


@pytest.mark.parametrize("name", FIRST_HALF)
def test_a_crash_is_reported_with_the_learners_line(name):
    result = check(name, crashes)
    assert not result and result.status == "failed"
    assert "raised ZeroDivisionError" in result.message
    assert "scale = 1 / 0" in result.details and "in crashes, line" in result.details


@pytest.mark.parametrize("name", FIRST_HALF)
def test_a_missing_return_is_reported(name):
    result = check(name, returns_none)
    assert not result and result.status == "failed"
    assert "returned None" in result.message and "return" in result.message


@pytest.mark.parametrize("name", TENSOR_OUTPUTS)
def test_a_wrong_shape_is_reported(name):
    result = check(name, reference_then(name, wider))
    assert not result
    assert "shape" in result.message and "expected" in result.message, str(result)


@pytest.mark.parametrize("name", TENSOR_OUTPUTS)
def test_a_wrong_dtype_is_reported(name):
    result = check(name, reference_then(name, as_double_or_float))
    assert not result
    assert "dtype" in str(result) and "expected torch." in str(result), str(result)


@pytest.mark.parametrize("name", FLOAT_OUTPUTS)
def test_nan_is_reported(name):
    # the notebook's own cases: with a mask that hides every key, one NaN also looks like the
    # catalogued "NaN on a fully masked row"
    result = check(name, reference_then(name, with_nan), REGISTRY[name].make_cases())
    assert not result and result.status == "failed"
    assert "contains NaN" in result.message


@pytest.mark.parametrize("name", sorted(PLAIN_OUTPUTS))
def test_a_wrong_type_is_reported(name):
    change, type_name = PLAIN_OUTPUTS[name]
    result = check(name, reference_then(name, change))   # decode's is even a catalogued mistake
    assert not result and result.status in ("failed", "mistake")
    assert f"got {type_name}" in str(result), str(result)


@pytest.mark.parametrize("name", FIRST_HALF)
@pytest.mark.parametrize("stub", [stub_ellipsis, stub_pass, stub_not_implemented],
                         ids=lambda stub: stub.__name__)
def test_stubs_are_not_attempted(name, stub):
    result = check(name, stub)
    assert not result
    assert result.status == "not attempted" and "not attempted yet" in result.message
    assert str(result).startswith("[TODO]")


def test_broadcast_shape_requires_a_value_error_on_a_clash():
    result = check("broadcast_shape", broadcast_zip_longest)
    assert result
    def returns_max(shape_a, shape_b):   # no error at all; also not the catalogued variant's form
        a = (1,) * (len(shape_b) - len(shape_a)) + tuple(shape_a)
        b = (1,) * (len(shape_a) - len(shape_b)) + tuple(shape_b)
        return tuple(max(x, y) for x, y in zip(a, b))
    assert_named("broadcast_shape", returns_max, "no error on a clash")


def test_a_wrong_error_type_on_a_clash_is_explained_even_when_not_catalogued():
    def raises_type_error(shape_a, shape_b):
        try:
            return broadcast_zip_longest(shape_a, shape_b)
        except ValueError:
            raise TypeError("cannot broadcast") from None
    result = check("broadcast_shape", raises_type_error)
    assert not result
    assert "expected your function to raise ValueError" in result.message
    assert "it raised TypeError" in result.message


def test_a_named_mistake_shows_where_it_was_first_seen():
    result = assert_named("padding_mask", padding_on_queries, "padding mask on the query axis")
    assert "first seen on case 1" in result.details
    assert "shape (2, 1, 5, 1), expected (2, 1, 1, 5)" in result.details


def test_a_named_mistake_that_raises_shows_the_learners_line():
    result = assert_named("encode", encode_brackets, "KeyError on an unknown token")
    assert "ids = [vocab[w] for w in sentence.split()]" in result.details
    assert "KeyError" in result.details


@pytest.mark.parametrize("name", FIRST_HALF)
def test_checks_are_fast(name):
    exercise = REGISTRY[name]
    wrong = exercise.mistakes[0].variant
    check(name, exercise.reference)   # warm up
    for fn in (exercise.reference, wrong):
        best = min(_seconds(lambda: check(name, fn)) for _ in range(3))
        assert best < 0.5, f"{name}: {best:.2f} s"


def _seconds(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start
