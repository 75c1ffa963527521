"""Round 6a of the blind learner trial: notebooks 01-06, new answers written without reading the checks.

'R' answers are right in an unusual style (each compared with tfmlib's reference in a scratch script
on random inputs of awkward sizes and dtypes before being labelled right); 'W' answers are mistakes a
learner could make. TRIAL_round6a.md reviews every verdict that goes against its label.
"""
import functools
import itertools
import math
import re

import numpy as np
import torch
import torch.nn.functional as F

from harness import *
import tfmlib

# ----------------------------------------------------------------------------------------------
# 01 broadcast_shape
# ----------------------------------------------------------------------------------------------


@A("broadcast_shape", "R", "zip_longest over reversed shapes")
def bs_zip_longest(shape_a, shape_b):
    out = []
    for axis, (a, b) in enumerate(itertools.zip_longest(reversed(shape_a), reversed(shape_b),
                                                        fillvalue=1), start=1):
        if a != b and a != 1 and b != 1:
            raise ValueError(f"axis -{axis}: sizes {a} and {b} clash")
        out.append(b if a == 1 else a)
    return tuple(reversed(out))


@A("broadcast_shape", "R", "recursive, last axis first")
def bs_recursive(shape_a, shape_b):
    shape_a, shape_b = tuple(shape_a), tuple(shape_b)
    if not shape_a or not shape_b:
        return shape_a or shape_b
    a, b = shape_a[-1], shape_b[-1]
    if a != b and 1 not in (a, b):
        raise ValueError(f"sizes {a} and {b} clash")
    return bs_recursive(shape_a[:-1], shape_b[:-1]) + ((b if a == 1 else a),)


@A("broadcast_shape", "R", "lru_cache on a pure function")
@functools.lru_cache(maxsize=None)
def bs_cached(shape_a, shape_b):
    n = max(len(shape_a), len(shape_b))
    a = (1,) * (n - len(shape_a)) + tuple(shape_a)
    b = (1,) * (n - len(shape_b)) + tuple(shape_b)
    out = []
    for i in range(n):
        if a[i] == b[i] or b[i] == 1:
            out.append(a[i])
        elif a[i] == 1:
            out.append(b[i])
        else:
            raise ValueError(f"{a[i]} vs {b[i]}: these sizes do not broadcast")
    return tuple(out)


@A("broadcast_shape", "W", "compares sizes with `is`")
def bs_is(shape_a, shape_b):
    n = max(len(shape_a), len(shape_b))
    a = (1,) * (n - len(shape_a)) + tuple(shape_a)
    b = (1,) * (n - len(shape_b)) + tuple(shape_b)
    out = []
    for x, y in zip(a, b):
        if x is not y and x != 1 and y != 1:
            raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(out)


@A("broadcast_shape", "W", "max of the two sizes (0 vs 1 gives 1)")
def bs_max(shape_a, shape_b):
    n = max(len(shape_a), len(shape_b))
    a = (1,) * (n - len(shape_a)) + tuple(shape_a)
    b = (1,) * (n - len(shape_b)) + tuple(shape_b)
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"sizes {x} and {y} clash")
    return tuple(max(x, y) for x, y in zip(a, b))


@A("broadcast_shape", "W", "clash test with min(x, y) != 1 (0 vs 1 raises)")
def bs_min_clash(shape_a, shape_b):
    n = max(len(shape_a), len(shape_b))
    a = (1,) * (n - len(shape_a)) + tuple(shape_a)
    b = (1,) * (n - len(shape_b)) + tuple(shape_b)
    out = []
    for x, y in zip(a, b):
        if x != y and min(x, y) != 1:
            raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(out)


@A("broadcast_shape", "W", "pads the shorter shape on the right (left-aligned)")
def bs_left_aligned(shape_a, shape_b):
    n = max(len(shape_a), len(shape_b))
    a = tuple(shape_a) + (1,) * (n - len(shape_a))
    b = tuple(shape_b) + (1,) * (n - len(shape_b))
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(out)


@A("broadcast_shape", "W", "zip truncates: the longer shape's extra axes are lost")
def bs_zip_truncates(shape_a, shape_b):
    out = []
    for x, y in zip(reversed(shape_a), reversed(shape_b)):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


@A("broadcast_shape", "W", "message names the shape lengths, not the clashing sizes")
def bs_wrong_sizes_in_message(shape_a, shape_b):
    n = max(len(shape_a), len(shape_b))
    a = (1,) * (n - len(shape_a)) + tuple(shape_a)
    b = (1,) * (n - len(shape_b)) + tuple(shape_b)
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"shapes of {len(shape_a)} and {len(shape_b)} axes clash")
        out.append(y if x == 1 else x)
    return tuple(out)


@A("broadcast_shape", "W", "raises an AssertionError, not a ValueError")
def bs_assert(shape_a, shape_b):
    n = max(len(shape_a), len(shape_b))
    a = (1,) * (n - len(shape_a)) + tuple(shape_a)
    b = (1,) * (n - len(shape_b)) + tuple(shape_b)
    out = []
    for x, y in zip(a, b):
        assert x == y or 1 in (x, y), f"sizes {x} and {y} clash"
        out.append(y if x == 1 else x)
    return tuple(out)


@A("broadcast_shape", "W", "fixed 4 axes, leading 1s stripped afterwards")
def bs_fixed_four(shape_a, shape_b):
    a = (1,) * (4 - len(shape_a)) + tuple(shape_a)
    b = (1,) * (4 - len(shape_b)) + tuple(shape_b)
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    while len(out) > 1 and out[0] == 1:
        out.pop(0)
    return tuple(out)


@A("broadcast_shape", "W", "returns a list")
def bs_list(shape_a, shape_b):
    return list(bs_zip_longest(shape_a, shape_b))


# ----------------------------------------------------------------------------------------------
# 02 build_vocab
# ----------------------------------------------------------------------------------------------
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


@A("build_vocab", "R", "dict.fromkeys keeps first-seen order")
def bv_fromkeys(sentences, specials=SPECIALS):
    tokens = [*specials, *(t for s in sentences for t in s.split())]
    return {t: i for i, t in enumerate(dict.fromkeys(tokens))}


@A("build_vocab", "R", "re.split on whitespace, `not in` loop")
def bv_regex(sentences, specials=SPECIALS):
    vocab = {}
    for token in itertools.chain(specials, *(re.split(r"\s+", s) for s in sentences)):
        if token and token not in vocab:
            vocab[token] = len(vocab)
    return vocab


@A("build_vocab", "W", "split(' '): tabs and double spaces")
def bv_split_space(sentences, specials=SPECIALS):
    vocab = {t: i for i, t in enumerate(specials)}
    for s in sentences:
        for t in s.split(" "):
            if t not in vocab:
                vocab[t] = len(vocab)
    return vocab


@A("build_vocab", "W", "lower-cases every word")
def bv_lower(sentences, specials=SPECIALS):
    return bv_fromkeys([s.lower() for s in sentences], specials)


@A("build_vocab", "W", "words sorted alphabetically")
def bv_sorted(sentences, specials=SPECIALS):
    words = sorted({t for s in sentences for t in s.split()} - set(specials))
    return {t: i for i, t in enumerate([*specials, *words])}


@A("build_vocab", "W", "mutable default: the vocab lives on between calls")
def bv_mutable_default(sentences, specials=SPECIALS, _vocab={}):
    for t in itertools.chain(specials, *(s.split() for s in sentences)):
        _vocab.setdefault(t, len(_vocab))
    return dict(_vocab)


@A("build_vocab", "W", "specials numbered after the words")
def bv_specials_last(sentences, specials=SPECIALS):
    words = list(dict.fromkeys(t for s in sentences for t in s.split() if t not in specials))
    return {t: i for i, t in enumerate([*words, *specials])}


@A("build_vocab", "W", "ids from every occurrence (last one wins, gaps)")
def bv_every_occurrence(sentences, specials=SPECIALS):
    vocab = {t: i for i, t in enumerate(specials)}
    words = [t for s in sentences for t in s.split()]
    vocab.update({t: len(specials) + i for i, t in enumerate(words)})
    return vocab


@A("build_vocab", "W", "ignores the specials argument")
def bv_hardcoded_specials(sentences, specials=SPECIALS):
    return bv_fromkeys(sentences, SPECIALS)


@A("build_vocab", "W", "a typed special gets a second, new id")
def bv_typed_special_new_id(sentences, specials=SPECIALS):
    vocab = {t: i for i, t in enumerate(specials)}
    words = dict.fromkeys(t for s in sentences for t in s.split())
    vocab.update({t: len(specials) + i for i, t in enumerate(words)})
    return vocab


@A("build_vocab", "W", "ordered by frequency")
def bv_by_frequency(sentences, specials=SPECIALS):
    from collections import Counter
    counts = Counter(t for s in sentences for t in s.split() if t not in specials)
    return {t: i for i, t in enumerate([*specials, *(t for t, _ in counts.most_common())])}


@A("build_vocab", "W", "strips punctuation off words")
def bv_strip_punct(sentences, specials=SPECIALS):
    vocab = {t: i for i, t in enumerate(specials)}
    for s in sentences:
        for t in s.split():
            t = t.strip(".,!?;:")
            if t and t not in vocab:
                vocab[t] = len(vocab)
    return vocab


# ----------------------------------------------------------------------------------------------
# 02 encode
# ----------------------------------------------------------------------------------------------


@A("encode", "R", "map with a conditional lambda, list concatenation")
def enc_map(sentence, vocab, add_bos=False, add_eos=False):
    unk = vocab["<unk>"]
    ids = list(map(lambda t: vocab[t] if t in vocab else unk, sentence.split()))
    return [vocab["<bos>"]] * bool(add_bos) + ids + [vocab["<eos>"]] * bool(add_eos)


@A("encode", "R", "re.split, empty pieces dropped, unpacking")
def enc_regex(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t, vocab["<unk>"]) for t in re.split(r"\s+", sentence) if t]
    return [*([vocab["<bos>"]] if add_bos else []), *ids, *([vocab["<eos>"]] if add_eos else [])]


@A("encode", "W", "split(' ')")
def enc_split_space(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t, vocab["<unk>"]) for t in sentence.split(" ")]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])


@A("encode", "W", "<unk> hard-coded as id 3")
def enc_unk3(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t, 3) for t in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])


@A("encode", "W", "<bos> 1 and <eos> 2 hard-coded")
def enc_bos_eos_hardcoded(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t, vocab["<unk>"]) for t in sentence.split()]
    return ([1] if add_bos else []) + ids + ([2] if add_eos else [])


@A("encode", "W", "lower-cases the sentence")
def enc_lower(sentence, vocab, add_bos=False, add_eos=False):
    return enc_map(sentence.lower(), vocab, add_bos, add_eos)


@A("encode", "W", "mutable default list accumulates between calls")
def enc_mutable_default(sentence, vocab, add_bos=False, add_eos=False, _ids=[]):
    if add_bos:
        _ids.append(vocab["<bos>"])
    _ids.extend(vocab.get(t, vocab["<unk>"]) for t in sentence.split())
    if add_eos:
        _ids.append(vocab["<eos>"])
    return list(_ids)


@A("encode", "W", "adds unknown words to the vocabulary")
def enc_grows_vocab(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.setdefault(t, len(vocab)) for t in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])


@A("encode", "W", "position in the dict instead of the id")
def enc_dict_position(sentence, vocab, add_bos=False, add_eos=False):
    keys = list(vocab)
    pos = lambda t: keys.index(t if t in vocab else "<unk>")
    return ([pos("<bos>")] if add_bos else []) + [pos(t) for t in sentence.split()] + \
        ([pos("<eos>")] if add_eos else [])


@A("encode", "W", "escapes typed special tokens to <unk>")
def enc_escape_specials(sentence, vocab, add_bos=False, add_eos=False):
    unk = vocab["<unk>"]
    ids = [unk if t in SPECIALS else vocab.get(t, unk) for t in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])


@A("encode", "W", "strips punctuation before the lookup")
def enc_strip_punct(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t.strip(".,!?"), vocab["<unk>"]) for t in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])


@A("encode", "W", "<eos> first and <bos> last")
def enc_swapped(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t, vocab["<unk>"]) for t in sentence.split()]
    return ([vocab["<eos>"]] if add_eos else []) + ids + ([vocab["<bos>"]] if add_bos else [])


# ----------------------------------------------------------------------------------------------
# 02 decode
# ----------------------------------------------------------------------------------------------


@A("decode", "R", "takewhile up to <eos>, then filter")
def dec_takewhile(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    tokens = (inv[int(i)] for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids))
    if skip_specials:
        tokens = (t for t in itertools.takewhile(lambda t: t != "<eos>", tokens) if t not in SPECIALS)
    return " ".join(tokens)


@A("decode", "R", "string built by +=, first <eos> found with index()")
def dec_concat(ids, vocab, skip_specials=True):
    inv = dict(zip(vocab.values(), vocab.keys()))
    tokens = [inv[int(i)] for i in ids]
    if skip_specials and "<eos>" in tokens:
        tokens = tokens[: tokens.index("<eos>")]
    text = ""
    for t in tokens:
        if skip_specials and t in SPECIALS:
            continue
        text += (" " if text else "") + t
    return text


@A("decode", "W", "ids below 4 treated as specials")
def dec_ids_below_4(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in ids:
        i = int(i)
        if skip_specials and i == vocab.get("<eos>", 2):
            break
        if skip_specials and i < 4:
            continue
        out.append(inv[i])
    return " ".join(out)


@A("decode", "W", "stops at <eos> even with skip_specials=False")
def dec_always_stops(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in ids:
        t = inv[int(i)]
        if t == "<eos>":
            break
        if skip_specials and t in SPECIALS:
            continue
        out.append(t)
    return " ".join(out)


@A("decode", "W", "drops <eos> but does not stop there")
def dec_no_stop(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    return " ".join(inv[int(i)] for i in ids if not (skip_specials and inv[int(i)] in SPECIALS))


@A("decode", "W", "anything in <angle brackets> is special")
def dec_angle_brackets(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in ids:
        t = inv[int(i)]
        if skip_specials and t == "<eos>":
            break
        if skip_specials and t.startswith("<") and t.endswith(">"):
            continue
        out.append(t)
    return " ".join(out)


@A("decode", "W", "id read as a position in the dict")
def dec_dict_position(ids, vocab, skip_specials=True):
    keys = list(vocab)
    out = []
    for i in ids:
        t = keys[int(i)]
        if skip_specials and t == "<eos>":
            break
        if skip_specials and t in SPECIALS:
            continue
        out.append(t)
    return " ".join(out)


@A("decode", "W", "stops at the last <eos>, not the first")
def dec_last_eos(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    tokens = [inv[int(i)] for i in ids]
    if skip_specials and "<eos>" in tokens:
        tokens = tokens[: len(tokens) - 1 - tokens[::-1].index("<eos>")]
    return " ".join(t for t in tokens if not (skip_specials and t in SPECIALS))


@A("decode", "W", "i.item() on every id")
def dec_item(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in ids:
        t = inv[i.item()]
        if skip_specials and t == "<eos>":
            break
        if skip_specials and t in SPECIALS:
            continue
        out.append(t)
    return " ".join(out)


_DEC_CACHE = {}


@A("decode", "W", "inverted vocab cached by the vocab's size")
def dec_cache_by_len(ids, vocab, skip_specials=True):
    inv = _DEC_CACHE.setdefault(len(vocab), {i: t for t, i in vocab.items()})
    out = []
    for i in ids:
        t = inv[int(i)]
        if skip_specials and t == "<eos>":
            break
        if skip_specials and t in SPECIALS:
            continue
        out.append(t)
    return " ".join(out)


@A("decode", "W", "skips only <pad>")
def dec_skip_pad_only(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in ids:
        t = inv[int(i)]
        if skip_specials and t == "<eos>":
            break
        if skip_specials and t == "<pad>":
            continue
        out.append(t)
    return " ".join(out)


# ----------------------------------------------------------------------------------------------
# 02 pad_batch
# ----------------------------------------------------------------------------------------------


@A("pad_batch", "R", "list arithmetic, then one torch.tensor")
def pb_lists(id_lists, pad_id, max_len=None):
    if len(id_lists) == 0:
        raise ValueError("id_lists: empty batch, nothing to pad")
    length = max_len if max_len is not None else max(len(ids) for ids in id_lists)
    rows = [([int(i) for i in ids] + [pad_id] * length)[:length] for ids in id_lists]
    return torch.tensor(rows, dtype=torch.long).reshape(len(id_lists), length)


@A("pad_batch", "R", "torch.nn.utils.rnn.pad_sequence, then cut or F.pad")
def pb_pad_sequence(id_lists, pad_id, max_len=None):
    if not id_lists:
        raise ValueError("id_lists: expected at least one list of ids")
    seqs = [torch.tensor([int(i) for i in ids], dtype=torch.long) for ids in id_lists]
    batch = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=pad_id)
    if max_len is not None:
        batch = F.pad(batch[:, :max_len], (0, max(0, max_len - batch.size(1))), value=pad_id)
    return batch


@A("pad_batch", "W", "pads on the left")
def pb_left(id_lists, pad_id, max_len=None):
    if not id_lists:
        raise ValueError("empty batch")
    length = max_len if max_len is not None else max(len(ids) for ids in id_lists)
    rows = [([pad_id] * length + [int(i) for i in ids][:length])[-length:] for ids in id_lists]
    return torch.tensor(rows, dtype=torch.long)


@A("pad_batch", "W", "torch.zeros without dtype: float32")
def pb_float(id_lists, pad_id, max_len=None):
    if not id_lists:
        raise ValueError("empty batch")
    length = max_len if max_len is not None else max(len(ids) for ids in id_lists)
    batch = torch.zeros(len(id_lists), length) + pad_id
    for r, ids in enumerate(id_lists):
        ids = [int(i) for i in ids][:length]
        batch[r, :len(ids)] = torch.tensor(ids, dtype=torch.float32)
    return batch


@A("pad_batch", "W", "fills with 0, not pad_id")
def pb_zero_fill(id_lists, pad_id, max_len=None):
    if not id_lists:
        raise ValueError("empty batch")
    length = max_len if max_len is not None else max(len(ids) for ids in id_lists)
    batch = torch.zeros(len(id_lists), length, dtype=torch.long)
    for r, ids in enumerate(id_lists):
        ids = [int(i) for i in ids][:length]
        batch[r, :len(ids)] = torch.tensor(ids, dtype=torch.long)
    return batch


@A("pad_batch", "W", "max_len only cuts, never lengthens")
def pb_max_len_min(id_lists, pad_id, max_len=None):
    if not id_lists:
        raise ValueError("empty batch")
    length = max(len(ids) for ids in id_lists)
    if max_len is not None:
        length = min(length, max_len)
    return pb_lists(id_lists, pad_id, length)


@A("pad_batch", "W", "empty batch returns an empty tensor")
def pb_empty_ok(id_lists, pad_id, max_len=None):
    if not id_lists:
        return torch.zeros(0, max_len or 0, dtype=torch.long)
    return pb_lists(id_lists, pad_id, max_len)


@A("pad_batch", "W", "extends the caller's lists in place")
def pb_extend_inputs(id_lists, pad_id, max_len=None):
    if not id_lists:
        raise ValueError("empty batch")
    length = max_len if max_len is not None else max(len(ids) for ids in id_lists)
    for ids in id_lists:
        if isinstance(ids, list):
            ids.extend([pad_id] * (length - len(ids)))
    return torch.tensor([[int(i) for i in ids][:length] + [pad_id] * (length - len(ids))
                         for ids in id_lists], dtype=torch.long).reshape(len(id_lists), length)


@A("pad_batch", "W", "cuts long lists from the left (keeps the end)")
def pb_cut_left(id_lists, pad_id, max_len=None):
    if not id_lists:
        raise ValueError("empty batch")
    length = max_len if max_len is not None else max(len(ids) for ids in id_lists)
    rows = []
    for ids in id_lists:
        ids = [int(i) for i in ids]
        ids = ids[-length:] if len(ids) > length else ids
        rows.append(ids + [pad_id] * (length - len(ids)))
    return torch.tensor(rows, dtype=torch.long).reshape(len(id_lists), length)


@A("pad_batch", "W", "empty batch: sorted(...)[-1] raises an IndexError")
def pb_index_error(id_lists, pad_id, max_len=None):
    length = max_len if max_len is not None else len(sorted(id_lists, key=len)[-1])
    return pb_lists(id_lists, pad_id, length)


@A("pad_batch", "W", "int32 ids")
def pb_int32(id_lists, pad_id, max_len=None):
    return pb_lists(id_lists, pad_id, max_len).int()


# ----------------------------------------------------------------------------------------------
# 03 embed
# ----------------------------------------------------------------------------------------------


@A("embed", "R", "index_select on flattened ids, D ** 0.5")
def emb_index_select(token_ids, table, scale=True):
    rows = torch.index_select(table, 0, token_ids.reshape(-1)).reshape(*token_ids.shape, table.size(1))
    return rows * table.size(1) ** 0.5 if scale else rows


@A("embed", "R", "F.embedding")
def emb_f_embedding(token_ids, table, scale=True):
    rows = F.embedding(token_ids, table)
    return rows * math.sqrt(table.shape[-1]) if scale else rows


@A("embed", "R", "indexing, then in-place scaling of the copy")
def emb_inplace_copy(token_ids, table, scale=True):
    rows = table[token_ids]
    if scale:
        rows *= math.sqrt(table.size(1))
    return rows


@A("embed", "W", "scales by sqrt(V)")
def emb_sqrt_v(token_ids, table, scale=True):
    rows = table[token_ids]
    return rows * math.sqrt(table.size(0)) if scale else rows


@A("embed", "W", "divides by sqrt(D)")
def emb_divide(token_ids, table, scale=True):
    rows = table[token_ids]
    return rows / math.sqrt(table.size(1)) if scale else rows


@A("embed", "W", "always scales")
def emb_always_scale(token_ids, table, scale=True):
    return table[token_ids] * math.sqrt(table.size(1))


@A("embed", "W", "scales the table in place")
def emb_scale_table_inplace(token_ids, table, scale=True):
    if scale:
        table.mul_(math.sqrt(table.size(1)))
    return table[token_ids].clone()


@A("embed", "W", "sqrt of L (token_ids.size(-1)) instead of D")
def emb_sqrt_l(token_ids, table, scale=True):
    rows = table[token_ids]
    return rows * math.sqrt(token_ids.size(-1)) if scale else rows


_EMB_CACHE = {}


@A("embed", "W", "scaled table cached by id(table)")
def emb_cache_scaled_table(token_ids, table, scale=True):
    if not scale:
        return table[token_ids]
    key = id(table)
    if key not in _EMB_CACHE:
        _EMB_CACHE[key] = table * math.sqrt(table.size(1))
    return _EMB_CACHE[key][token_ids]


@A("embed", "W", "one-hot matmul in float32")
def emb_one_hot_f32(token_ids, table, scale=True):
    rows = F.one_hot(token_ids, table.size(0)).float() @ table.float()
    return rows * math.sqrt(table.size(1)) if scale else rows


generics("embed", emb_index_select, ["f64", "mutate", "idcache", "buffer", "counter"])


# ----------------------------------------------------------------------------------------------
# 03 sinusoidal_positional_encoding
# ----------------------------------------------------------------------------------------------


@A("sinusoidal_positional_encoding", "R", "torch.polar in float64, stacked and flattened")
def pe_polar(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    z = torch.polar(torch.ones(max_len, d_model // 2, dtype=torch.float64), pos * omega)
    return torch.stack((z.imag, z.real), dim=-1).reshape(max_len, d_model).float()


@A("sinusoidal_positional_encoding", "R", "the notebook's own float32 recipe (section 2)")
def pe_notebook_f32(max_len, d_model):
    position = torch.arange(max_len, dtype=torch.float32)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)
    omega = 10000 ** (-two_i / d_model)
    angle = position * omega
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


@A("sinusoidal_positional_encoding", "R", "exp(-log(10000) * 2i / d), float64 inside")
def pe_exp_log(max_len, d_model):
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    angle = torch.arange(max_len, dtype=torch.float64).unsqueeze(1) * div
    pe = torch.empty(max_len, d_model, dtype=torch.float64)
    pe[:, ::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe.to(torch.float32)


@A("sinusoidal_positional_encoding", "W", "sin and cos swapped")
def pe_swapped(max_len, d_model):
    pe = pe_polar(max_len, d_model)
    return pe.reshape(max_len, -1, 2).flip(-1).reshape(max_len, d_model)


@A("sinusoidal_positional_encoding", "W", "exponent -i/d for pair i (not -2i/d)")
def pe_half_exponent(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(d_model // 2, dtype=torch.float64) / d_model)
    pe = torch.stack((torch.sin(pos * omega), torch.cos(pos * omega)), -1)
    return pe.reshape(max_len, d_model).float()


@A("sinusoidal_positional_encoding", "W", "10 ** (-j / 2) shortcut (right at d_model = 8)")
def pe_shortcut(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    omega = 10.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / 2)
    pe = torch.stack((torch.sin(pos * omega), torch.cos(pos * omega)), -1)
    return pe.reshape(max_len, d_model).float()


@A("sinusoidal_positional_encoding", "W", "[all sines | all cosines] instead of interleaved")
def pe_concat(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.cat((torch.sin(pos * omega), torch.cos(pos * omega)), -1).float()


@A("sinusoidal_positional_encoding", "W", "positions start at 1")
def pe_from_one(max_len, d_model):
    return pe_polar(max_len + 1, d_model)[1:].clone()


@A("sinusoidal_positional_encoding", "W", "lru_cache returns the same tensor every call")
@functools.lru_cache(maxsize=None)
def pe_lru(max_len, d_model):
    return pe_polar(max_len, d_model)


_PE_TABLES = {}


@A("sinusoidal_positional_encoding", "W", "slice of a 5000-row table kept per d_model")
def pe_precomputed_5000(max_len, d_model):
    if d_model not in _PE_TABLES:
        _PE_TABLES[d_model] = pe_polar(5000, d_model)
    return _PE_TABLES[d_model][:max_len]


@A("sinusoidal_positional_encoding", "W", "base 1000")
def pe_base_1000(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    omega = 1000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.stack((torch.sin(pos * omega), torch.cos(pos * omega)), -1)
    return pe.reshape(max_len, d_model).float()


@A("sinusoidal_positional_encoding", "W", "each column its own exponent -j/d")
def pe_per_column_exponent(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    j = torch.arange(d_model, dtype=torch.float64)
    angle = pos * 10000.0 ** (-j / d_model)
    pe = torch.where(j.long() % 2 == 0, torch.sin(angle), torch.cos(angle))
    return pe.float()


generics("sinusoidal_positional_encoding", pe_polar, ["f64", "counter"])


# ----------------------------------------------------------------------------------------------
# 03 add_positional_encoding
# ----------------------------------------------------------------------------------------------


@A("add_positional_encoding", "R", "torch.add with narrow and unsqueeze")
def ape_narrow(x, pe):
    return torch.add(x, pe.narrow(0, 0, x.size(1)).unsqueeze(0))


@A("add_positional_encoding", "R", "loop over the batch, stacked")
def ape_loop(x, pe):
    return torch.stack([x[b] + pe[: x.shape[1]] for b in range(x.shape[0])])


@A("add_positional_encoding", "R", "float64 inside, cast back")
def ape_f64(x, pe):
    return (x.double() + pe[: x.size(1)].double()).to(x.dtype)


@A("add_positional_encoding", "W", "x += pe[:L] in place")
def ape_inplace(x, pe):
    x += pe[: x.size(1)]
    return x


@A("add_positional_encoding", "W", "pe[:B] (batch axis) instead of pe[:L]")
def ape_batch_axis(x, pe):
    return x + pe[: x.size(0)]


@A("add_positional_encoding", "W", "last L rows of pe")
def ape_last_rows(x, pe):
    return x + pe[pe.size(0) - x.size(1):]


@A("add_positional_encoding", "W", "no slice (works when max_len == L)")
def ape_no_slice(x, pe):
    return x + pe


@A("add_positional_encoding", "W", "pe cast to float32")
def ape_pe_float(x, pe):
    return x + pe[: x.size(1)].float()


@A("add_positional_encoding", "W", "scales x by sqrt(D) again")
def ape_rescale(x, pe):
    return x * math.sqrt(x.size(-1)) + pe[: x.size(1)]


_APE_CACHE = {}


@A("add_positional_encoding", "W", "sliced pe cached by id(pe) and L")
def ape_cache(x, pe):
    key = (id(pe), x.size(1))
    if key not in _APE_CACHE:
        _APE_CACHE[key] = pe[: x.size(1)].clone()
    return x + _APE_CACHE[key]


generics("add_positional_encoding", ape_narrow, ["f32", "f64", "mutate", "buffer", "counter"])


# ----------------------------------------------------------------------------------------------
# 03 apply_rope
# ----------------------------------------------------------------------------------------------


def _rope_angle(x, positions):
    length, dim = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(length)
    inv = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    return positions.to(torch.float64)[:, None] * inv            # (L, D/2)


@A("apply_rope", "R", "complex multiplication in float64")
def rope_complex(x, positions=None):
    angle = _rope_angle(x, positions)
    pairs = x.to(torch.float64).reshape(*x.shape[:-1], -1, 2).contiguous()
    rotated = torch.view_as_complex(pairs) * torch.polar(torch.ones_like(angle), angle)
    return torch.view_as_real(rotated).reshape(x.shape).to(x.dtype)


@A("apply_rope", "R", "even/odd slices written into empty_like")
def rope_slices(x, positions=None):
    angle = _rope_angle(x, positions)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


@A("apply_rope", "R", "2x2 rotation matrices with einsum, float64 inside")
def rope_einsum(x, positions=None):
    angle = _rope_angle(x, positions)
    c, s = angle.cos(), angle.sin()
    rot = torch.stack((torch.stack((c, -s), -1), torch.stack((s, c), -1)), -2)   # (L, D/2, 2, 2)
    pairs = x.to(torch.float64).reshape(*x.shape[:-1], -1, 2)
    return torch.einsum("lpij,...lpj->...lpi", rot, pairs).reshape(x.shape).to(x.dtype)


@A("apply_rope", "W", "pairs i and i + D/2 (Hugging Face layout)")
def rope_half_split(x, positions=None):
    angle = _rope_angle(x, positions)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x0, x1 = x.chunk(2, dim=-1)
    return torch.cat((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1)


def _rope_with_angle(x, angle):
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1).flatten(-2)


@A("apply_rope", "W", "rotates the other way")
def rope_clockwise(x, positions=None):
    return _rope_with_angle(x, -_rope_angle(x, positions))


@A("apply_rope", "W", "ignores positions")
def rope_ignore_positions(x, positions=None):
    return _rope_with_angle(x, _rope_angle(x, None))


@A("apply_rope", "W", "exponent -i/D for pair i")
def rope_half_exponent(x, positions=None):
    length, dim = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(length)
    inv = 10000.0 ** (-torch.arange(dim // 2, dtype=torch.float64) / dim)
    return _rope_with_angle(x, positions.to(torch.float64)[:, None] * inv)


@A("apply_rope", "W", "L read from x.shape[1]")
def rope_shape1(x, positions=None):
    if positions is None:
        positions = torch.arange(x.shape[1])
    inv = 10000.0 ** (-torch.arange(0, x.shape[-1], 2, dtype=torch.float64) / x.shape[-1])
    return _rope_with_angle(x, positions.to(torch.float64)[:, None] * inv)


@A("apply_rope", "W", "angles computed in the input's dtype")
def rope_angle_in_dtype(x, positions=None):
    length, dim = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(length)
    inv = 10000.0 ** (-torch.arange(0, dim, 2, dtype=x.dtype) / dim)
    angle = positions.to(x.dtype)[:, None] * inv
    return _rope_with_angle(x, angle)


@A("apply_rope", "W", "writes the rotation into x in place")
def rope_inplace(x, positions=None):
    angle = _rope_angle(x, positions)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x0, x1 = x[..., 0::2].clone(), x[..., 1::2].clone()
    x[..., 0::2] = x0 * cos - x1 * sin
    x[..., 1::2] = x0 * sin + x1 * cos
    return x


@A("apply_rope", "W", "positions made relative to the first one")
def rope_relative(x, positions=None):
    if positions is not None:
        positions = positions - positions[0]
    return _rope_with_angle(x, _rope_angle(x, positions))


_ROPE_CACHE = {}


@A("apply_rope", "W", "cos/sin cached by (L, D) only")
def rope_cache_by_shape(x, positions=None):
    key = tuple(x.shape[-2:])
    if key not in _ROPE_CACHE:
        _ROPE_CACHE[key] = _rope_angle(x, positions)
    return _rope_with_angle(x, _ROPE_CACHE[key])


generics("apply_rope", rope_slices, ["f32", "f64", "mutate", "idcache", "buffer"])


# ----------------------------------------------------------------------------------------------
# 04 padding_mask
# ----------------------------------------------------------------------------------------------


@A("padding_mask", "R", "ne, then view to (B, 1, 1, L)")
def pm_ne_view(token_ids, pad_id):
    b, l = token_ids.shape
    return token_ids.ne(pad_id).view(b, 1, 1, l)


@A("padding_mask", "R", "torch.where(ids == pad, False, True), two unsqueezes")
def pm_where(token_ids, pad_id):
    return torch.where(token_ids == pad_id, False, True).unsqueeze(1).unsqueeze(1)


@A("padding_mask", "R", "(ids - pad_id).bool()")
def pm_subtract(token_ids, pad_id):
    return (token_ids - pad_id).bool()[:, None, None, :]


@A("padding_mask", "W", "== instead of !=")
def pm_inverted(token_ids, pad_id):
    return (token_ids == pad_id)[:, None, None, :]


@A("padding_mask", "W", "pad hard-coded as 0")
def pm_zero(token_ids, pad_id):
    return (token_ids != 0)[:, None, None, :]


@A("padding_mask", "W", "(B, 1, L, 1): masks queries")
def pm_query_axis(token_ids, pad_id):
    return (token_ids != pad_id)[:, None, :, None]


@A("padding_mask", "W", "3-D (B, 1, L)")
def pm_3d(token_ids, pad_id):
    return (token_ids != pad_id)[:, None, :]


@A("padding_mask", "W", "long 0/1 mask")
def pm_long(token_ids, pad_id):
    return (token_ids != pad_id).long()[:, None, None, :]


@A("padding_mask", "W", "(B, 1, L, L): padded queries masked too")
def pm_both_axes(token_ids, pad_id):
    real = token_ids != pad_id
    return real[:, None, :, None] & real[:, None, None, :]


@A("padding_mask", "W", "everything after the first pad is padding")
def pm_cumsum(token_ids, pad_id):
    return ((token_ids == pad_id).cumsum(1) == 0)[:, None, None, :]


@A("padding_mask", "W", "mask from lengths: arange(L) < number of real tokens")
def pm_lengths(token_ids, pad_id):
    lengths = (token_ids != pad_id).sum(1, keepdim=True)
    return (torch.arange(token_ids.size(1)) < lengths)[:, None, None, :]


generics("padding_mask", pm_ne_view, ["idcache", "shapecache", "buffer", "counter"])


# ----------------------------------------------------------------------------------------------
# 04 causal_mask
# ----------------------------------------------------------------------------------------------


@A("causal_mask", "R", "arange column >= arange row")
def cm_arange(seq_len):
    i = torch.arange(seq_len)
    return (i[:, None] >= i[None, :]).view(1, 1, seq_len, seq_len)


@A("causal_mask", "R", "NOT of the strict upper triangle")
def cm_not_triu(seq_len):
    return ~torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)[None, None]


@A("causal_mask", "R", "float tril, then .bool()")
def cm_float_tril(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len)).bool().reshape(1, 1, seq_len, seq_len)


@A("causal_mask", "W", "triu: the future is visible")
def cm_triu(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).triu()[None, None]


@A("causal_mask", "W", "tril(diagonal=-1): no token sees itself")
def cm_off_by_one(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril(-1)[None, None]


@A("causal_mask", "W", "(L, L), no leading axes")
def cm_2d(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()


@A("causal_mask", "W", "lru_cache: the same tensor every call")
@functools.lru_cache(maxsize=None)
def cm_lru(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()[None, None]


_CM_BUF = torch.ones(512, 512, dtype=torch.bool).tril()


@A("causal_mask", "W", "slice of a 512 x 512 buffer")
def cm_buffer512(seq_len):
    return _CM_BUF[:seq_len, :seq_len][None, None]


@A("causal_mask", "W", "float mask 0 / -inf")
def cm_float_inf(seq_len):
    return torch.full((seq_len, seq_len), float("-inf")).triu(1)[None, None]


@A("causal_mask", "W", "nn.Transformer.generate_square_subsequent_mask == 0")
def cm_torch(seq_len):
    return (torch.nn.Transformer.generate_square_subsequent_mask(seq_len) == 0)[None, None]


@A("causal_mask", "W", "uint8 (byte) mask")
def cm_uint8(seq_len):
    return torch.ones(seq_len, seq_len, dtype=torch.uint8).tril()[None, None]


@A("causal_mask", "W", "one unsqueeze only: (1, L, L)")
def cm_3d(seq_len):
    return (torch.ones(seq_len, seq_len).tril() == 1).unsqueeze(0)


# ----------------------------------------------------------------------------------------------
# 04 target_mask
# ----------------------------------------------------------------------------------------------


@A("target_mask", "R", "arange comparisons and &, all inline")
def tm_inline(token_ids, pad_id):
    i = torch.arange(token_ids.size(1), device=token_ids.device)
    return (token_ids != pad_id)[:, None, None, :] & (i[:, None] >= i)[None, None]


@A("target_mask", "R", "einsum of float masks, then .bool()")
def tm_einsum(token_ids, pad_id):
    keys = (token_ids != pad_id).float()                                  # (B, L)
    tril = torch.ones(token_ids.size(1), token_ids.size(1)).tril()        # (L, L)
    return torch.einsum("bk,qk->bqk", keys, tril).bool()[:, None]


@A("target_mask", "R", "my own padding_mask and causal_mask from above")
def tm_reuse(token_ids, pad_id):
    return torch.logical_and(pm_ne_view(token_ids, pad_id), cm_arange(token_ids.size(1)))


@A("target_mask", "W", "| instead of &")
def tm_or(token_ids, pad_id):
    return pm_ne_view(token_ids, pad_id) | cm_arange(token_ids.size(1))


@A("target_mask", "W", "padding on the query axis")
def tm_query_pad(token_ids, pad_id):
    return (token_ids != pad_id)[:, None, :, None] & cm_arange(token_ids.size(1))


@A("target_mask", "W", "causal size from token_ids.size(0)")
def tm_batch_size(token_ids, pad_id):
    return pm_ne_view(token_ids, pad_id) & cm_arange(token_ids.size(0))


@A("target_mask", "W", "no heads axis: (B, L, L)")
def tm_3d(token_ids, pad_id):
    return (pm_ne_view(token_ids, pad_id) & cm_arange(token_ids.size(1)))[:, 0]


@A("target_mask", "W", "padded queries hidden too")
def tm_both_pad(token_ids, pad_id):
    real = token_ids != pad_id
    return real[:, None, :, None] & real[:, None, None, :] & cm_arange(token_ids.size(1))


_TM_CAUSAL = {}


@A("target_mask", "W", "causal mask of the first L seen, sliced afterwards")
def tm_first_causal(token_ids, pad_id):
    if "m" not in _TM_CAUSAL:
        _TM_CAUSAL["m"] = cm_arange(token_ids.size(1))
    L = token_ids.size(1)
    return pm_ne_view(token_ids, pad_id) & _TM_CAUSAL["m"][..., :L, :L]


@A("target_mask", "W", "causal tril(-1)")
def tm_off_by_one(token_ids, pad_id):
    return pm_ne_view(token_ids, pad_id) & cm_off_by_one(token_ids.size(1))


@A("target_mask", "W", "pad hard-coded as 0")
def tm_pad0(token_ids, pad_id):
    return pm_zero(token_ids, pad_id) & cm_arange(token_ids.size(1))


generics("target_mask", tm_inline, ["shapecache", "buffer", "counter"])


# ----------------------------------------------------------------------------------------------
# 05 scaled_dot_product_attention
# ----------------------------------------------------------------------------------------------


@A("scaled_dot_product_attention", "R", "hand-written softmax in float64, cast back")
def sdpa_f64_manual(query, key, value, mask=None):
    q, k, v = query.double(), key.double(), value.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    top = scores.amax(-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    e = torch.exp(scores - top)
    total = e.sum(-1, keepdim=True)
    weights = torch.where(total > 0, e / total.clamp_min(1e-300), torch.zeros_like(e))
    return (weights @ v).to(query.dtype), weights.to(query.dtype)


@A("scaled_dot_product_attention", "R", "einsum and torch.where after the softmax")
def sdpa_einsum(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if mask is not None:
        weights = torch.where(mask, weights, torch.zeros((), dtype=weights.dtype))
    return torch.einsum("...qk,...kd->...qd", weights, value), weights


@A("scaled_dot_product_attention", "R", "finfo(dtype).min fill, masked weights zeroed")
def sdpa_finfo_min(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask
    return weights @ value, weights


@A("scaled_dot_product_attention", "R", "-inf fill, nan_to_num after the softmax")
def sdpa_nan_to_num(query, key, value, mask=None):
    scores = torch.matmul(query, key.mT) * (1.0 / math.sqrt(key.size(-1)))
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), -math.inf)
    weights = torch.nan_to_num(torch.softmax(scores, -1), nan=0.0)
    return torch.matmul(weights, value), weights


def _sdpa_fill(fill):
    def attention(query, key, value, mask=None):
        scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask, fill)
        weights = torch.softmax(scores, dim=-1)
        return weights @ value, weights
    return attention


A("scaled_dot_product_attention", "W", "fill -1e9")(_sdpa_fill(-1e9))
A("scaled_dot_product_attention", "W", "fill -1e4")(_sdpa_fill(-1e4))
A("scaled_dot_product_attention", "W", "fill finfo(float32).min")(_sdpa_fill(torch.finfo(torch.float32).min))


@A("scaled_dot_product_attention", "W", "divides by d_k")
def sdpa_div_dk(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / query.size(-1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, -1)
    if mask is not None:
        weights = torch.where(mask, weights, 0.0)
    return weights @ value, weights


@A("scaled_dot_product_attention", "W", "softmax over dim=-2")
def sdpa_dim2(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, -2))
    return weights @ value, weights


@A("scaled_dot_product_attention", "W", "masks only when mask.any()")
def sdpa_mask_any(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None and mask.any():
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.where(mask, torch.softmax(scores, -1), 0.0)
    else:
        weights = torch.softmax(scores, -1)
    return weights @ value, weights


@A("scaled_dot_product_attention", "W", "no zeroing: NaN on a row with no key")
def sdpa_nan_rows(query, key, value, mask=None):
    return _sdpa_fill(float("-inf"))(query, key, value, mask)


@A("scaled_dot_product_attention", "W", "transpose(1, 2)")
def sdpa_transpose12(query, key, value, mask=None):
    scores = query @ key.transpose(1, 2) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, -1))
    return weights @ value, weights


@A("scaled_dot_product_attention", "W", "scale from value's width (d_v)")
def sdpa_dv(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(value.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, -1))
    return weights @ value, weights


@A("scaled_dot_product_attention", "W", "mask multiplied after the softmax, no renormalising")
def sdpa_mask_after(query, key, value, mask=None):
    weights = torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), -1)
    if mask is not None:
        weights = weights * mask
    return weights @ value, weights


@A("scaled_dot_product_attention", "W", "returns the weights from before the zeroing")
def sdpa_stale_weights(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    raw = torch.softmax(scores, -1)
    used = torch.where(mask, raw, 0.0) if mask is not None else raw
    return used @ value, raw


@A("scaled_dot_product_attention", "R", "scores as key @ query^T, transposed back")
def sdpa_kq(query, key, value, mask=None):
    scores = (key @ query.transpose(-2, -1)).transpose(-2, -1)
    scores = scores / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, -1))
    return weights @ value, weights


@A("scaled_dot_product_attention", "W", "query /= sqrt(d_k) in place")
def sdpa_inplace_query(query, key, value, mask=None):
    query /= math.sqrt(query.size(-1))
    scores = query @ key.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, -1))
    return weights @ value, weights


@A("scaled_dot_product_attention", "W", "softmax in float32, cast back to the input dtype")
def sdpa_f32_softmax(query, key, value, mask=None):
    scores = (query.float() @ key.float().transpose(-2, -1)).to(query.dtype) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores.float(), -1)).to(query.dtype)
    return (weights @ value).float(), weights


@A("scaled_dot_product_attention", "W", "F.scaled_dot_product_attention for the context")
def sdpa_torch(query, key, value, mask=None):
    _, weights = sdpa_einsum(query, key, value, mask)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask), weights


generics("scaled_dot_product_attention", sdpa_einsum, ["f32", "f64", "mutate", "idcache", "counter"])
# W_buffer only rewrites a tensor output, so on this tuple it changes nothing: a right answer
A("scaled_dot_product_attention", "R", "generic:buffer, a no-op on a tuple output")(W_buffer(sdpa_einsum))


# ----------------------------------------------------------------------------------------------
# 06 linear
# ----------------------------------------------------------------------------------------------


@A("linear", "R", "einsum ...i,oi->...o")
def lin_einsum(x, weight, bias=None):
    y = torch.einsum("...i,oi->...o", x, weight)
    return y if bias is None else y + bias


@A("linear", "R", "addmm on x flattened to 2-D")
def lin_addmm(x, weight, bias=None):
    flat = x.reshape(-1, x.size(-1))
    y = torch.addmm(bias, flat, weight.t()) if bias is not None else flat @ weight.t()
    return y.reshape(*x.shape[:-1], weight.size(0))


@A("linear", "R", "weight @ x as a column vector")
def lin_column(x, weight, bias=None):
    y = (weight @ x.unsqueeze(-1)).squeeze(-1)
    return y + bias if bias is not None else y


@A("linear", "R", "float64 inside, cast back")
def lin_f64(x, weight, bias=None):
    y = x.double() @ weight.double().T
    if bias is not None:
        y = y + bias.double()
    return y.to(x.dtype)


@A("linear", "W", "no transpose")
def lin_no_t(x, weight, bias=None):
    y = x @ weight
    return y + bias if bias is not None else y


@A("linear", "W", "bias ignored")
def lin_no_bias(x, weight, bias=None):
    return x @ weight.T


@A("linear", "W", "`if bias:` on a tensor")
def lin_if_bias(x, weight, bias=None):
    y = x @ weight.T
    if bias:
        y = y + bias
    return y


@A("linear", "W", "weight.t_() in place")
def lin_t_inplace(x, weight, bias=None):
    y = x @ weight.t_()
    return y + bias if bias is not None else y


@A("linear", "W", "F.linear")
def lin_f_linear(x, weight, bias=None):
    return F.linear(x, weight, bias)


@A("linear", "W", "einsum ...i,io->...o")
def lin_einsum_io(x, weight, bias=None):
    y = torch.einsum("...i,io->...o", x, weight)
    return y + bias if bias is not None else y


@A("linear", "W", "bias added before the product")
def lin_bias_first(x, weight, bias=None):
    return (x + bias if bias is not None else x) @ weight.T


@A("linear", "W", "x.view(-1, in) (fails on non-contiguous x)")
def lin_view(x, weight, bias=None):
    y = x.view(-1, x.size(-1)) @ weight.T
    y = y.view(*x.shape[:-1], weight.size(0))
    return y + bias if bias is not None else y


generics("linear", lin_einsum, ["f32", "f64", "mutate", "idcache", "buffer", "counter"])


# ----------------------------------------------------------------------------------------------
# 06 split_heads
# ----------------------------------------------------------------------------------------------


@A("split_heads", "R", "unflatten, permute")
def sh_unflatten(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).permute(0, 2, 1, 3)


@A("split_heads", "R", "stack of chunks")
def sh_chunks(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)


@A("split_heads", "R", "contiguous().view(), transpose, contiguous()")
def sh_contiguous(x, num_heads):
    b, l, d = x.shape
    return x.contiguous().view(b, l, num_heads, d // num_heads).transpose(1, 2).contiguous()


@A("split_heads", "W", "reshape straight to (B, H, L, d_k)")
def sh_straight(x, num_heads):
    b, l, d = x.shape
    return x.reshape(b, num_heads, l, d // num_heads)


@A("split_heads", "R", "view, then transpose (splitting one axis never needs a copy)")
def sh_view(x, num_heads):
    b, l, d = x.shape
    return x.view(b, l, num_heads, d // num_heads).transpose(1, 2)


@A("split_heads", "W", "heads interleaved: reshape (B, L, d_k, H)")
def sh_interleaved(x, num_heads):
    b, l, d = x.shape
    return x.reshape(b, l, d // num_heads, num_heads).permute(0, 3, 1, 2)


@A("split_heads", "W", "transpose first, then reshape")
def sh_transpose_first(x, num_heads):
    b, l, d = x.shape
    return x.transpose(1, 2).reshape(b, num_heads, l, d // num_heads)


@A("split_heads", "W", "num_heads hard-coded 4")
def sh_four(x, num_heads):
    return sh_unflatten(x, 4)


@A("split_heads", "W", "torch.split(x, num_heads): chunks of size H")
def sh_split_size(x, num_heads):
    return torch.stack(torch.split(x, num_heads, dim=-1), dim=1)


@A("split_heads", "W", "permute(0, 2, 3, 1): (B, H, d_k, L)")
def sh_bad_permute(x, num_heads):
    b, l, d = x.shape
    return x.reshape(b, l, num_heads, d // num_heads).permute(0, 2, 3, 1)


generics("split_heads", sh_unflatten, ["f32", "mutate", "buffer", "counter"])
# the cached output is a view of x, which keeps x alive (so its id is never reused) and shows
# every in-place change of x: it always holds what a fresh call would return
A("split_heads", "R", "generic:idcache on a view of x")(W_idcache(sh_unflatten))


# ----------------------------------------------------------------------------------------------
# 06 merge_heads
# ----------------------------------------------------------------------------------------------


@A("merge_heads", "R", "permute, flatten")
def mh_flatten(x):
    return x.permute(0, 2, 1, 3).flatten(2)


@A("merge_heads", "R", "cat of the heads along features")
def mh_cat(x):
    return torch.cat(x.unbind(1), dim=-1)


@A("merge_heads", "R", "movedim, reshape with -1")
def mh_movedim(x):
    return x.movedim(1, 2).reshape(x.size(0), x.size(2), -1)


@A("merge_heads", "W", "reshape without transpose")
def mh_no_t(x):
    b, h, l, d = x.shape
    return x.reshape(b, l, h * d)


@A("merge_heads", "W", "transpose then view")
def mh_view(x):
    b, h, l, d = x.shape
    return x.transpose(1, 2).view(b, l, h * d)


@A("merge_heads", "W", "cat along axis 1")
def mh_cat_axis1(x):
    return torch.cat(x.unbind(1), dim=1)


@A("merge_heads", "W", "transpose(2, 3) then reshape")
def mh_t23(x):
    b, h, l, d = x.shape
    return x.transpose(2, 3).reshape(b, l, h * d)


@A("merge_heads", "W", "permute(0, 2, 3, 1): heads interleaved")
def mh_interleave(x):
    b, h, l, d = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, l, h * d)


@A("merge_heads", "W", "mean over heads")
def mh_mean(x):
    return x.mean(1)


@A("merge_heads", "W", "L read from x.size(1)")
def mh_size1(x):
    return x.transpose(1, 2).reshape(x.size(0), x.size(1), -1)


generics("merge_heads", mh_flatten, ["f32", "f64", "mutate", "idcache", "buffer", "counter"])


# ----------------------------------------------------------------------------------------------
# 06 multi_head_attention
# ----------------------------------------------------------------------------------------------
sdpa = tfmlib.scaled_dot_product_attention


def _proj(x, w, b):
    y = x @ w.T
    return y if b is None else y + b


@A("multi_head_attention", "R", "per-head projections with einsum")
def mha_einsum(query, key, value, params, num_heads, mask=None):
    d = query.size(-1)
    dk = d // num_heads

    def heads(x, name):
        w = params[f"w_{name}"].reshape(num_heads, dk, d)
        y = torch.einsum("bld,hkd->bhlk", x, w)
        b = params.get(f"b_{name}")
        return y if b is None else y + b.reshape(num_heads, 1, dk)

    context, weights = sdpa(heads(query, "q"), heads(key, "k"), heads(value, "v"), mask)
    w_o = params["w_o"].reshape(d, num_heads, dk)
    out = torch.einsum("bhlk,ohk->blo", context, w_o)
    b_o = params.get("b_o")
    return (out if b_o is None else out + b_o), weights


@A("multi_head_attention", "R", "a Python loop over heads")
def mha_loop(query, key, value, params, num_heads, mask=None):
    d = query.size(-1)
    dk = d // num_heads
    contexts, maps = [], []
    for h in range(num_heads):
        rows = slice(h * dk, (h + 1) * dk)
        parts = []
        for x, name in ((query, "q"), (key, "k"), (value, "v")):
            b = params.get(f"b_{name}")
            parts.append(_proj(x, params[f"w_{name}"][rows], None if b is None else b[rows]))
        m = None if mask is None else torch.broadcast_to(
            mask, (query.size(0), num_heads, query.size(1), key.size(1)))[:, h]
        c, w = sdpa(*parts, m)
        contexts.append(c)
        maps.append(w)
    return _proj(torch.cat(contexts, -1), params["w_o"], params.get("b_o")), torch.stack(maps, 1)


@A("multi_head_attention", "R", "tfmlib's linear, split_heads, merge_heads")
def mha_tfmlib_parts(query, key, value, params, num_heads, mask=None):
    q = tfmlib.split_heads(tfmlib.linear(query, params["w_q"], params.get("b_q")), num_heads)
    k = tfmlib.split_heads(tfmlib.linear(key, params["w_k"], params.get("b_k")), num_heads)
    v = tfmlib.split_heads(tfmlib.linear(value, params["w_v"], params.get("b_v")), num_heads)
    context, weights = sdpa(q, k, v, mask)
    return tfmlib.linear(tfmlib.merge_heads(context), params["w_o"], params.get("b_o")), weights


def _mha(query, key, value, params, num_heads, mask=None, *, split=None, merge=None,
         use_mask=True, project_out=True, transpose_w=True, v_weight="w_v", attention=None):
    split = split or sh_unflatten
    merge = merge or mh_flatten
    attention = attention or sdpa

    def lin(x, name, w=None):
        w = params[w or f"w_{name}"]
        y = x @ (w.T if transpose_w else w)
        b = params.get(f"b_{name}")
        return y if b is None else y + b

    q = split(lin(query, "q"), num_heads)
    k = split(lin(key, "k"), num_heads)
    v = split(lin(value, "v", v_weight), num_heads)
    context, weights = attention(q, k, v, mask if use_mask else None)
    merged = merge(context)
    return (lin(merged, "o") if project_out else merged), weights


@A("multi_head_attention", "W", "no output projection")
def mha_no_out(query, key, value, params, num_heads, mask=None):
    return _mha(query, key, value, params, num_heads, mask, project_out=False)


@A("multi_head_attention", "W", "straight reshape to heads")
def mha_straight(query, key, value, params, num_heads, mask=None):
    return _mha(query, key, value, params, num_heads, mask, split=sh_straight)


@A("multi_head_attention", "W", "mask ignored")
def mha_no_mask(query, key, value, params, num_heads, mask=None):
    return _mha(query, key, value, params, num_heads, mask, use_mask=False)


@A("multi_head_attention", "W", "x @ w without .T")
def mha_no_t(query, key, value, params, num_heads, mask=None):
    return _mha(query, key, value, params, num_heads, mask, transpose_w=False)


@A("multi_head_attention", "W", "key and value taken from query")
def mha_self_only(query, key, value, params, num_heads, mask=None):
    return _mha(query, query, query, params, num_heads, mask)


@A("multi_head_attention", "W", "attention scaled by sqrt(D), not sqrt(d_k)")
def mha_scale_d(query, key, value, params, num_heads, mask=None):
    d = query.size(-1)

    def attention(q, k, v, m):
        return sdpa(q * math.sqrt(q.size(-1)) / math.sqrt(d), k, v, m)
    return _mha(query, key, value, params, num_heads, mask, attention=attention)


@A("multi_head_attention", "W", "num_heads hard-coded 4")
def mha_four(query, key, value, params, num_heads, mask=None):
    return _mha(query, key, value, params, 4, mask)


@A("multi_head_attention", "W", "merge without transpose")
def mha_merge_no_t(query, key, value, params, num_heads, mask=None):
    return _mha(query, key, value, params, num_heads, mask, merge=mh_no_t)


@A("multi_head_attention", "W", "value projected with w_k")
def mha_v_with_wk(query, key, value, params, num_heads, mask=None):
    return _mha(query, key, value, params, num_heads, mask, v_weight="w_k")


@A("multi_head_attention", "W", "heads interleaved in split and merge")
def mha_interleaved(query, key, value, params, num_heads, mask=None):
    return _mha(query, key, value, params, num_heads, mask, split=sh_interleaved, merge=mh_interleave)


@A("multi_head_attention", "W", "weights averaged over heads")
def mha_mean_weights(query, key, value, params, num_heads, mask=None):
    out, weights = _mha(query, key, value, params, num_heads, mask)
    return out, weights.mean(1)


@A("multi_head_attention", "W", "nn.MultiheadAttention")
def mha_torch(query, key, value, params, num_heads, mask=None):
    d = query.size(-1)
    layer = torch.nn.MultiheadAttention(d, num_heads, batch_first=True, dtype=query.dtype)
    with torch.no_grad():
        layer.in_proj_weight.copy_(torch.cat([params["w_q"], params["w_k"], params["w_v"]]))
        layer.in_proj_bias.copy_(torch.cat([params.get(f"b_{n}", torch.zeros(d)) for n in "qkv"]))
        layer.out_proj.weight.copy_(params["w_o"])
        layer.out_proj.bias.copy_(params.get("b_o", torch.zeros(d)))
    _, weights = _mha(query, key, value, params, num_heads, mask)
    out, _ = layer(query, key, value, attn_mask=None if mask is None else
                   ~mask.expand(query.size(0), num_heads, query.size(1), key.size(1))
                   .reshape(-1, query.size(1), key.size(1)), need_weights=False)
    return out, weights


generics("multi_head_attention", mha_tfmlib_parts, ["f32", "mutate", "idcache", "counter"])
A("multi_head_attention", "R", "generic:buffer, a no-op on a tuple output")(W_buffer(mha_tfmlib_parts))


# ----------------------------------------------------------------------------------------------
# second batch, written after the first run: outputs that are tuples (the generic buffer
# wrapper leaves those alone), tables precomputed to a fixed length, and more subtle mistakes
# ----------------------------------------------------------------------------------------------


@A("broadcast_shape", "R", "returns a torch.Size (a tuple subclass)")
def bs_torch_size(shape_a, shape_b):
    return torch.Size(bs_zip_longest(shape_a, shape_b))


@A("broadcast_shape", "W", "a size 0 stretches like a 1")
def bs_zero_stretches(shape_a, shape_b):
    out = []
    for a, b in itertools.zip_longest(reversed(shape_a), reversed(shape_b), fillvalue=1):
        if a != b and a not in (0, 1) and b not in (0, 1):
            raise ValueError(f"sizes {a} and {b} clash")
        out.append(b if a in (0, 1) else a)
    return tuple(reversed(out))


@A("build_vocab", "W", "words numbered from 4 whatever the specials")
def bv_words_from_4(sentences, specials=SPECIALS):
    vocab = {t: i for i, t in enumerate(specials)}
    for t in dict.fromkeys(t for s in sentences for t in s.split()):
        if t not in vocab:
            vocab[t] = 4 + sum(1 for k in vocab if k not in specials)
    return vocab


@A("encode", "W", "split(' ') with empty pieces dropped (tabs and newlines stay)")
def enc_split_space_filtered(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t, vocab["<unk>"]) for t in sentence.split(" ") if t]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])


@A("encode", "W", "vocab.get(t) or unk: id 0 becomes <unk>")
def enc_or_unk(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t) or vocab["<unk>"] for t in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])


@A("decode", "W", "pops trailing pads off the caller's list")
def dec_pop_pads(ids, vocab, skip_specials=True):
    if isinstance(ids, list):
        while ids and ids[-1] == vocab["<pad>"]:
            ids.pop()
    return dec_takewhile(ids, vocab, skip_specials)


@A("decode", "W", "stops at the first <pad> as well")
def dec_stop_at_pad(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in ids:
        t = inv[int(i)]
        if skip_specials and t in ("<eos>", "<pad>"):
            break
        if skip_specials and t in SPECIALS:
            continue
        out.append(t)
    return " ".join(out)


@A("pad_batch", "R", "numpy full, then torch.from_numpy")
def pb_numpy(id_lists, pad_id, max_len=None):
    if len(id_lists) == 0:
        raise ValueError("id_lists: expected at least one list of ids")
    length = max_len if max_len is not None else max(map(len, id_lists))
    out = np.full((len(id_lists), length), pad_id, dtype=np.int64)
    for r, ids in enumerate(id_lists):
        ids = np.asarray(list(ids)[:length], dtype=np.int64)
        out[r, : len(ids)] = ids
    return torch.from_numpy(out)


@A("pad_batch", "W", "raises when a list is longer than max_len")
def pb_raise_long(id_lists, pad_id, max_len=None):
    if max_len is not None and any(len(ids) > max_len for ids in id_lists):
        raise ValueError("max_len: a list is longer than max_len")
    return pb_lists(id_lists, pad_id, max_len)


@A("embed", "W", "int(math.sqrt(D)): right when D is a square")
def emb_int_sqrt(token_ids, table, scale=True):
    rows = table[token_ids]
    return rows * int(math.sqrt(table.size(1))) if scale else rows


@A("embed", "W", "through numpy: no gradient, no bfloat16")
def emb_numpy(token_ids, table, scale=True):
    rows = torch.from_numpy(table.detach().numpy()[token_ids.numpy()])
    return rows * math.sqrt(table.size(1)) if scale else rows


@A("sinusoidal_positional_encoding", "W", "arange(0, d, 2) // d: integer division")
def pe_floor_div(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-(torch.arange(0, d_model, 2) // d_model)).double()
    pe = torch.stack((torch.sin(pos * omega), torch.cos(pos * omega)), -1)
    return pe.reshape(max_len, d_model).float()


@A("sinusoidal_positional_encoding", "W", "built as (d_model, max_len), then view instead of transpose")
def pe_view_not_t(max_len, d_model):
    return pe_polar(max_len, d_model).T.contiguous().view(max_len, d_model)


_PE5000 = {}


@A("sinusoidal_positional_encoding", "W", "a 5000-row table per d_model, sliced and cloned")
def pe_table5000_clone(max_len, d_model):
    if d_model not in _PE5000:
        _PE5000[d_model] = pe_polar(5000, d_model)
    return _PE5000[d_model][:max_len].clone()


@A("add_positional_encoding", "R", "slice by x.size(-2)")
def ape_minus2(x, pe):
    return x + pe[: x.size(-2)]


@A("add_positional_encoding", "W", "rows 1..L of pe (off by one)")
def ape_off_by_one(x, pe):
    return x + pe[1 : x.size(1) + 1]


@A("apply_rope", "W", "cos/sin in float32 for every dtype")
def rope_f32_angles(x, positions=None):
    angle = _rope_angle(x, positions).float()
    return _rope_with_angle(x, angle)


_ROPE_TABLES = {}


@A("apply_rope", "W", "cos/sin tables for 4096 positions, indexed by position")
def rope_table4096(x, positions=None):
    dim = x.shape[-1]
    if dim not in _ROPE_TABLES:
        angle = torch.arange(4096, dtype=torch.float64)[:, None] * \
            10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        _ROPE_TABLES[dim] = (angle.cos(), angle.sin())
    if positions is None:
        positions = torch.arange(x.shape[-2])
    cos, sin = (t[positions.long()].to(x.dtype) for t in _ROPE_TABLES[dim])
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1).flatten(-2)


_PM_PAD = {}


@A("padding_mask", "W", "the first pad_id seen is kept")
def pm_first_pad(token_ids, pad_id):
    pad = _PM_PAD.setdefault("pad", pad_id)
    return (token_ids != pad)[:, None, None, :]


_CM_CACHE = {}


@A("causal_mask", "R", "cached per length, cloned on return")
def cm_cache_clone(seq_len):
    if seq_len not in _CM_CACHE:
        _CM_CACHE[seq_len] = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()[None, None]
    return _CM_CACHE[seq_len].clone()


_CM_BUF5000 = torch.ones(5000, 5000, dtype=torch.bool).tril()


@A("causal_mask", "W", "slice of a 5000 x 5000 buffer, cloned")
def cm_buffer5000_clone(seq_len):
    return _CM_BUF5000[:seq_len, :seq_len][None, None].clone()


@A("target_mask", "R", "bool * bool")
def tm_mul(token_ids, pad_id):
    return pm_ne_view(token_ids, pad_id) * cm_arange(token_ids.size(1))


@A("scaled_dot_product_attention", "R", "log_softmax().exp(), masked weights zeroed")
def sdpa_log_softmax(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.log_softmax(scores, dim=-1).exp()
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ value, weights


@A("scaled_dot_product_attention", "W", "softmax by hand without subtracting the max")
def sdpa_exp_no_max(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    e = torch.exp(scores)
    if mask is not None:
        e = e * mask
    weights = torch.nan_to_num(e / e.sum(-1, keepdim=True))
    return weights @ value, weights


@A("scaled_dot_product_attention", "W", "one max over the whole tensor, not per row")
def sdpa_global_max(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    e = torch.exp(scores - scores.max())
    if mask is not None:
        e = e * mask
    weights = torch.nan_to_num(e / e.sum(-1, keepdim=True))
    return weights @ value, weights


@A("scaled_dot_product_attention", "W", "weights detached before @ value")
def sdpa_detached(query, key, value, mask=None):
    _, weights = sdpa_einsum(query, key, value, mask)
    return weights.detach() @ value, weights


_SDPA_BUF = {}


def _into_buffer(store, name, t):   # copy_ into the view keeps the autograd graph
    b = store.get(name)
    if b is None or b.numel() < t.numel() or b.dtype != t.dtype:
        b = store[name] = torch.empty(2 * t.numel(), dtype=t.dtype)
    v = b[: t.numel()].view(t.shape)
    v.copy_(t)
    return v


@A("scaled_dot_product_attention", "W", "context and weights in buffers of its own")
def sdpa_buffers(query, key, value, mask=None):
    context, weights = sdpa_einsum(query, key, value, mask)
    return _into_buffer(_SDPA_BUF, "c", context), _into_buffer(_SDPA_BUF, "w", weights)


@A("linear", "R", "homogeneous coordinates: bias as an extra column")
def lin_homogeneous(x, weight, bias=None):
    if bias is None:
        return x @ weight.T
    ones = torch.ones(*x.shape[:-1], 1, dtype=x.dtype)
    return torch.cat((x, ones), -1) @ torch.cat((weight, bias[:, None]), 1).T


@A("linear", "W", "torch.matmul(weight, x.T).T: right for 2-D x only")
def lin_double_t(x, weight, bias=None):
    y = (weight @ x.T).T if x.dim() > 1 else weight @ x
    return y + bias if bias is not None else y


@A("merge_heads", "R", "swapaxes, flatten(-2)")
def mh_swapaxes(x):
    return x.swapaxes(1, 2).flatten(-2)


@A("multi_head_attention", "W", "num_heads and d_k swapped (right when H == d_k)")
def mha_h_dk_swapped(query, key, value, params, num_heads, mask=None):
    return _mha(query, key, value, params, query.size(-1) // num_heads, mask)


@A("multi_head_attention", "W", "per-head output projection with w_o's rows, not its columns")
def mha_wo_rows(query, key, value, params, num_heads, mask=None):
    d = query.size(-1)
    dk = d // num_heads
    _, weights = _mha(query, key, value, params, num_heads, mask)
    q, k, v = (sh_unflatten(_proj(t, params[f"w_{n}"], params.get(f"b_{n}")), num_heads)
               for t, n in ((query, "q"), (key, "k"), (value, "v")))
    context, _ = sdpa(q, k, v, mask)
    w_o = params["w_o"]
    out = sum(context[:, h] @ w_o[h * dk:(h + 1) * dk, :] for h in range(num_heads))
    b_o = params.get("b_o")
    return (out if b_o is None else out + b_o), weights


_MHA_W = {}


@A("multi_head_attention", "W", "stacked q/k/v weight cached by id(params)")
def mha_cached_stack(query, key, value, params, num_heads, mask=None):
    if id(params) not in _MHA_W:
        _MHA_W[id(params)] = torch.cat([params["w_q"], params["w_k"], params["w_v"]])
    w_q, w_k, w_v = _MHA_W[id(params)].chunk(3)
    q = sh_unflatten(_proj(query, w_q, params.get("b_q")), num_heads)
    k = sh_unflatten(_proj(key, w_k, params.get("b_k")), num_heads)
    v = sh_unflatten(_proj(value, w_v, params.get("b_v")), num_heads)
    context, weights = sdpa(q, k, v, mask)
    return _proj(mh_flatten(context), params["w_o"], params.get("b_o")), weights


_MHA_BUF = {}


@A("multi_head_attention", "W", "output and weights in buffers of its own")
def mha_buffers(query, key, value, params, num_heads, mask=None):
    out, weights = mha_tfmlib_parts(query, key, value, params, num_heads, mask)
    return _into_buffer(_MHA_BUF, "o", out), _into_buffer(_MHA_BUF, "w", weights)


# ----------------------------------------------------------------------------------------------
# third batch: NumPy ids (the text of notebook 02 allows them) and float64 inputs computed in
# float32 inside, cast back (the add_positional_encoding check names that mistake)
# ----------------------------------------------------------------------------------------------


@A("pad_batch", "W", "refuses NumPy integer ids")
def pb_python_ints_only(id_lists, pad_id, max_len=None):
    for row, ids in enumerate(id_lists):
        if not all(isinstance(i, int) for i in ids):
            raise TypeError(f"id_lists[{row}]: expected Python ints")
    return pb_lists(id_lists, pad_id, max_len)


@A("decode", "W", "refuses NumPy integer ids")
def dec_python_ints_only(ids, vocab, skip_specials=True):
    ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    if not all(isinstance(i, int) for i in ids):
        raise TypeError("ids: expected Python ints")
    return dec_takewhile(ids, vocab, skip_specials)


def _via_float32(fn):
    """Computes in float32 and casts every floating output back to the input's dtype."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point())
        down = lambda a: a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
        args = [({k: down(v) for k, v in a.items()} if isinstance(a, dict) else down(a)) for a in args]
        return tensors_map(fn(*args, **kwargs), lambda t: t.to(dtype) if t.is_floating_point() else t)
    return wrapper


A("embed", "W", "float32 inside, cast back")(_via_float32(emb_index_select))
A("scaled_dot_product_attention", "W", "float32 inside, cast back")(_via_float32(sdpa_einsum))
A("linear", "W", "float32 inside, cast back")(_via_float32(lin_einsum))
A("apply_rope", "W", "float32 inside, cast back")(_via_float32(rope_slices))
A("multi_head_attention", "W", "float32 inside, cast back")(_via_float32(mha_tfmlib_parts))
A("add_positional_encoding", "W", "float32 inside, cast back")(_via_float32(ape_narrow))


@A("scaled_dot_product_attention", "W", "a 4-D mask cut to its first head")
def sdpa_first_head_mask(query, key, value, mask=None):
    if mask is not None and mask.dim() == 4:
        mask = mask[:, :1]
    return sdpa_einsum(query, key, value, mask)


@A("scaled_dot_product_attention", "W", "mask always given a heads axis (unsqueeze(1))")
def sdpa_unsqueeze_mask(query, key, value, mask=None):
    return sdpa_einsum(query, key, value, None if mask is None else mask.unsqueeze(1))


@A("multi_head_attention", "W", "a 4-D mask cut to its first head")
def mha_first_head_mask(query, key, value, params, num_heads, mask=None):
    if mask is not None and mask.dim() == 4:
        mask = mask[:, :1]
    return mha_tfmlib_parts(query, key, value, params, num_heads, mask)
