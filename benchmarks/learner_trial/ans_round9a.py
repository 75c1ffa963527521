"""Round 9a blind learner trial: notebooks 01-07. R = a right answer, W = a wrong one."""
from harness import *
import itertools, re, functools
import numpy as np
import torch.nn.functional as F

# ---------------------------------------------------------------- 01 broadcast_shape
@A("broadcast_shape", "R", "zip_longest over reversed shapes")
def bs_r1(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))

@A("broadcast_shape", "R", "recursive on the last axis")
def bs_r2(a, b):
    a, b = tuple(a), tuple(b)
    if not a: return b
    if not b: return a
    x, y = a[-1], b[-1]
    if x == y or y == 1: last = x
    elif x == 1: last = y
    else: raise ValueError(f"size {y} does not match size {x}")
    return bs_r2(a[:-1], b[:-1]) + (last,)

@A("broadcast_shape", "R", "pad with 1s then index loop, message names shapes and sizes")
def bs_r3(a, b):
    n = max(len(a), len(b))
    pa = [1] * (n - len(a)) + list(a); pb = [1] * (n - len(b)) + list(b)
    res = [0] * n
    for i in range(n):
        if pa[i] == pb[i]: res[i] = pa[i]
        elif pa[i] == 1: res[i] = pb[i]
        elif pb[i] == 1: res[i] = pa[i]
        else: raise ValueError(f"cannot broadcast {tuple(a)} with {tuple(b)}: {pa[i]} vs {pb[i]} at axis {i - n}")
    return tuple(res)

@A("broadcast_shape", "W", "max() of the sizes (0 against 1 gives 1)")
def bs_w1(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x != y and 1 not in (x, y): raise ValueError(f"sizes {x} and {y} clash")
        out.append(max(x, y))
    return tuple(reversed(out))

@A("broadcast_shape", "W", "compares with `is`")
def bs_w2(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if not (x is y or x == 1 or y == 1): raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))

@A("broadcast_shape", "W", "aligns from the left")
def bs_w3(a, b):
    out = []
    for x, y in itertools.zip_longest(a, b, fillvalue=1):
        if x != y and 1 not in (x, y): raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(out)

@A("broadcast_shape", "W", "zip truncates to the shorter shape")
def bs_w4(a, b):
    out = []
    for x, y in zip(reversed(a), reversed(b)):
        if x != y and 1 not in (x, y): raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))

@A("broadcast_shape", "W", "0 stretches like 1")
def bs_w5(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x != y and x not in (0, 1) and y not in (0, 1): raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x in (0, 1) else x)
    return tuple(reversed(out))

@A("broadcast_shape", "W", "error message names no size")
def bs_w6(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x != y and 1 not in (x, y): raise ValueError("shapes do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))

@A("broadcast_shape", "W", "returns a list")
def bs_w7(a, b): return list(bs_r1(a, b))

@A("broadcast_shape", "W", "calls torch.broadcast_shapes")
def bs_w8(a, b):
    try: return tuple(torch.broadcast_shapes(a, b))
    except RuntimeError as e: raise ValueError(str(e))

@A("broadcast_shape", "W", "raises RuntimeError on a clash")
def bs_w9(a, b):
    try: return bs_r1(a, b)
    except ValueError as e: raise RuntimeError(str(e))

@A("broadcast_shape", "W", "hard-coded notebook example")
def bs_w10(a, b):
    if tuple(a) == (3, 1) and tuple(b) == (4,): return (3, 4)
    return tuple(a) if len(a) >= len(b) else tuple(b)

@A("broadcast_shape", "W", "names only one size in the message")
def bs_w11(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x != y and 1 not in (x, y): raise ValueError(f"size {y} is not 1")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))

# ---------------------------------------------------------------- 02 tokenization
SP = ("<pad>", "<bos>", "<eos>", "<unk>")

@A("build_vocab", "R", "dict.fromkeys over a chain")
def bv_r1(sentences, specials=SP):
    words = itertools.chain(specials, *(s.split() for s in sentences))
    return {t: i for i, t in enumerate(dict.fromkeys(words))}

@A("build_vocab", "R", "re.findall(\\S+) and 'not in' loop")
def bv_r2(sentences, specials=SP):
    v = {}
    for t in specials:
        if t not in v: v[t] = len(v)
    for s in sentences:
        for t in re.findall(r"\S+", s):
            if t not in v: v[t] = len(v)
    return v

@A("build_vocab", "R", "list of seen tokens then enumerate")
def bv_r3(sentences, specials=SP):
    seen = list(specials)
    for s in list(sentences):
        for t in s.split():
            if t not in seen: seen.append(t)
    return dict(zip(seen, range(len(seen))))

@A("build_vocab", "W", "split(' ') keeps empty strings")
def bv_w1(sentences, specials=SP):
    v = {t: i for i, t in enumerate(specials)}
    for s in sentences:
        for t in s.split(" "): v.setdefault(t, len(v))
    return v

@A("build_vocab", "W", "lower-cases words")
def bv_w2(sentences, specials=SP):
    v = {t: i for i, t in enumerate(specials)}
    for s in sentences:
        for t in s.lower().split(): v.setdefault(t, len(v))
    return v

@A("build_vocab", "W", "strips punctuation")
def bv_w3(sentences, specials=SP):
    v = {t: i for i, t in enumerate(specials)}
    for s in sentences:
        for t in s.split():
            t = t.strip(".,!?;:") or t
            v.setdefault(t, len(v))
    return v

@A("build_vocab", "W", "sorted words instead of first-seen")
def bv_w4(sentences, specials=SP):
    words = sorted({t for s in sentences for t in s.split()} - set(specials))
    return {t: i for i, t in enumerate(list(specials) + words)}

@A("build_vocab", "W", "overwrites the id of a word seen twice / a typed special")
def bv_w5(sentences, specials=SP):
    v = {t: i for i, t in enumerate(specials)}
    n = len(v)
    for s in sentences:
        for t in s.split():
            if t in specials: continue
            v[t] = n; n += 1
    return v

@A("build_vocab", "W", "module-level vocab kept between calls")
def bv_w6(sentences, specials=SP, _v={}):
    for t in specials: _v.setdefault(t, len(_v))
    for s in sentences:
        for t in s.split(): _v.setdefault(t, len(_v))
    return dict(_v)

@A("build_vocab", "W", "id = len(vocab) counts typed specials twice (gap in ids)")
def bv_w7(sentences, specials=SP):
    v = {t: i for i, t in enumerate(specials)}
    n = len(v)
    for s in sentences:
        for t in s.split():
            if t not in v: v[t] = n
            n += 1
    return v

@A("build_vocab", "W", "specials after the words")
def bv_w8(sentences, specials=SP):
    v = {}
    for s in sentences:
        for t in s.split(): v.setdefault(t, len(v))
    for t in specials: v.setdefault(t, len(v))
    return v

def _unk(v): return v["<unk>"]

@A("encode", "R", "try/except KeyError")
def en_r1(sentence, vocab, add_bos=False, add_eos=False):
    ids = []
    for w in sentence.split():
        try: ids.append(vocab[w])
        except KeyError: ids.append(vocab["<unk>"])
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])

@A("encode", "R", "map with get, regex tokens, int() ids")
def en_r2(sentence, vocab, add_bos=False, add_eos=False):
    unk = vocab["<unk>"]
    ids = list(map(lambda w: int(vocab.get(w, unk)), re.findall(r"\S+", sentence)))
    if add_bos: ids = [vocab["<bos>"], *ids]
    if add_eos: ids = [*ids, vocab["<eos>"]]
    return ids

@A("encode", "R", "membership test and insert(0)")
def en_r3(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab[w] if w in vocab else vocab["<unk>"] for w in sentence.split()]
    if add_eos: ids.append(vocab["<eos>"])
    if add_bos: ids.insert(0, vocab["<bos>"])
    return ids

@A("encode", "W", "vocab.get(w) or unk: id 0 (a typed <pad>) becomes <unk>")
def en_w1(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w) or vocab["<unk>"] for w in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])

@A("encode", "W", "split(' ')")
def en_w2(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w, vocab["<unk>"]) for w in sentence.split(" ")]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])

@A("encode", "W", "hard-coded ids 1, 2, 3 for the specials")
def en_w3(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w, 3) for w in sentence.split()]
    return ([1] if add_bos else []) + ids + ([2] if add_eos else [])

@A("encode", "W", "id = position in the dict")
def en_w4(sentence, vocab, add_bos=False, add_eos=False):
    keys = list(vocab)
    f = lambda w: keys.index(w) if w in vocab else keys.index("<unk>")
    ids = [f(w) for w in sentence.split()]
    return ([f("<bos>")] if add_bos else []) + ids + ([f("<eos>")] if add_eos else [])

@A("encode", "W", "mutable default list accumulates")
def en_w5(sentence, vocab, add_bos=False, add_eos=False, _ids=[]):
    _ids += [vocab.get(w, vocab["<unk>"]) for w in sentence.split()]
    out = list(_ids)
    return ([vocab["<bos>"]] if add_bos else []) + out + ([vocab["<eos>"]] if add_eos else [])

@A("encode", "W", "lower-cases before lookup")
def en_w6(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w.lower(), vocab["<unk>"]) for w in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])

@A("encode", "W", "eos before bos order swapped when both")
def en_w7(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w, vocab["<unk>"]) for w in sentence.split()]
    if add_eos: ids.insert(0, vocab["<eos>"]) if add_bos else ids.append(vocab["<eos>"])
    if add_bos: ids.append(vocab["<bos>"]) if add_eos else ids.insert(0, vocab["<bos>"])
    return ids

@A("encode", "W", "returns a tensor")
def en_w8(sentence, vocab, add_bos=False, add_eos=False):
    return torch.tensor(en_r1(sentence, vocab, add_bos, add_eos), dtype=torch.long)

SPSET = set(SP)
@A("decode", "R", "takewhile up to <eos> then filter")
def de_r1(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    if isinstance(ids, torch.Tensor): ids = ids.tolist()
    toks = [inv[int(i)] for i in ids]
    if skip_specials:
        toks = [t for t in itertools.takewhile(lambda t: t != "<eos>", toks) if t not in SPSET]
    return " ".join(toks)

@A("decode", "R", "string accumulation with int() on each id")
def de_r2(ids, vocab, skip_specials=True):
    inv = dict(zip(vocab.values(), vocab.keys()))
    s = ""
    for i in ids:
        t = inv[int(i)]
        if skip_specials:
            if t == "<eos>": break
            if t in ("<pad>", "<bos>", "<unk>"): continue
        s = t if not s else s + " " + t
    return s

@A("decode", "R", "index of first <eos> then slice")
def de_r3(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    toks = [inv[i] for i in (ids.tolist() if torch.is_tensor(ids) else list(ids))]
    if skip_specials:
        if "<eos>" in toks: toks = toks[:toks.index("<eos>")]
        toks = [t for t in toks if t not in SP]
    return " ".join(toks)

@A("decode", "W", "stops at id 2 (not the token <eos>)")
def de_w1(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in (ids.tolist() if torch.is_tensor(ids) else ids):
        if skip_specials and i == 2: break
        if skip_specials and i in (0, 1, 2, 3): continue
        out.append(inv[i])
    return " ".join(out)

@A("decode", "W", "drops every token starting with '<'")
def de_w2(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in (ids.tolist() if torch.is_tensor(ids) else ids):
        t = inv[i]
        if skip_specials and t == "<eos>": break
        if skip_specials and t.startswith("<"): continue
        out.append(t)
    return " ".join(out)

@A("decode", "W", "keeps going after <eos>")
def de_w3(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    toks = [inv[i] for i in (ids.tolist() if torch.is_tensor(ids) else ids)]
    return " ".join(t for t in toks if not (skip_specials and t in SP))

@A("decode", "W", "stops at <eos> even when skip_specials=False")
def de_w4(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in (ids.tolist() if torch.is_tensor(ids) else ids):
        t = inv[i]
        if t == "<eos>": break
        if skip_specials and t in SP: continue
        out.append(t)
    return " ".join(out)

@A("decode", "W", "keeps <unk> (only pad/bos/eos are special)")
def de_w5(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in (ids.tolist() if torch.is_tensor(ids) else ids):
        t = inv[i]
        if skip_specials and t == "<eos>": break
        if skip_specials and t in ("<pad>", "<bos>"): continue
        out.append(t)
    return " ".join(out)

@A("decode", "W", "token = list(vocab)[id]")
def de_w6(ids, vocab, skip_specials=True):
    keys = list(vocab)
    out = []
    for i in (ids.tolist() if torch.is_tensor(ids) else ids):
        t = keys[i]
        if skip_specials and t == "<eos>": break
        if skip_specials and t in SP: continue
        out.append(t)
    return " ".join(out)

@A("decode", "W", "stops at the last <eos>")
def de_w7(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    toks = [inv[i] for i in (ids.tolist() if torch.is_tensor(ids) else ids)]
    if skip_specials:
        if "<eos>" in toks: toks = toks[:len(toks) - 1 - toks[::-1].index("<eos>")]
        toks = [t for t in toks if t not in SP]
    return " ".join(toks)

@A("decode", "W", "joins with no separator ('' .join)")
def de_w8(ids, vocab, skip_specials=True):
    return de_r1(ids, vocab, skip_specials).replace(" ", "")

@A("pad_batch", "R", "python lists padded then one torch.tensor")
def pb_r1(id_lists, pad_id, max_len=None):
    if len(id_lists) == 0: raise ValueError("id_lists is empty")
    L = max_len if max_len is not None else max(len(r) for r in id_lists)
    rows = [[int(i) for i in list(r)[:L]] + [int(pad_id)] * (L - min(len(r), L)) for r in id_lists]
    return torch.tensor(rows, dtype=torch.long).reshape(len(id_lists), L)

@A("pad_batch", "R", "pad_sequence then cut/pad to max_len")
def pb_r2(id_lists, pad_id, max_len=None):
    if not len(id_lists): raise ValueError("empty batch: no longest list")
    seqs = [torch.as_tensor([int(i) for i in r], dtype=torch.long) for r in id_lists]
    out = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=int(pad_id))
    if max_len is not None:
        out = out[:, :max_len]
        if out.size(1) < max_len:
            out = F.pad(out, (0, max_len - out.size(1)), value=int(pad_id))
    return out.contiguous()

@A("pad_batch", "R", "torch.full then per-element loop")
def pb_r3(id_lists, pad_id, max_len=None):
    if len(id_lists) < 1: raise ValueError(f"id_lists: got {len(id_lists)} lists")
    L = max_len if max_len is not None else max(map(len, id_lists))
    out = torch.full((len(id_lists), L), pad_id, dtype=torch.long)
    for b, r in enumerate(id_lists):
        for j, i in enumerate(r):
            if j >= L: break
            out[b, j] = int(i)
    return out

@A("pad_batch", "W", "pads on the left")
def pb_w1(id_lists, pad_id, max_len=None):
    L = max_len if max_len is not None else max(len(r) for r in id_lists)
    return torch.tensor([[pad_id] * (L - len(r[:L])) + list(r)[:L] for r in id_lists], dtype=torch.long)

@A("pad_batch", "W", "int32 tensor")
def pb_w2(id_lists, pad_id, max_len=None): return pb_r3(id_lists, pad_id, max_len).int()

@A("pad_batch", "W", "max_len only cuts, never pads further")
def pb_w3(id_lists, pad_id, max_len=None):
    L = max(len(r) for r in id_lists)
    if max_len is not None: L = min(L, max_len)
    return pb_r3(id_lists, pad_id, L)

@A("pad_batch", "W", "keeps the last max_len ids when cutting")
def pb_w4(id_lists, pad_id, max_len=None):
    L = max_len if max_len is not None else max(len(r) for r in id_lists)
    return pb_r1([list(r)[-L:] if len(r) > L else r for r in id_lists], pad_id, L)

@A("pad_batch", "W", "extends the caller's lists in place")
def pb_w5(id_lists, pad_id, max_len=None):
    L = max_len if max_len is not None else max(len(r) for r in id_lists)
    for r in id_lists:
        if isinstance(r, list): r.extend([pad_id] * (L - len(r)))
    return pb_r1(id_lists, pad_id, L)

@A("pad_batch", "W", "empty batch -> empty tensor instead of ValueError")
def pb_w6(id_lists, pad_id, max_len=None):
    if len(id_lists) == 0: return torch.zeros(0, max_len or 0, dtype=torch.long)
    return pb_r3(id_lists, pad_id, max_len)

@A("pad_batch", "W", "pads with 0 whatever pad_id")
def pb_w7(id_lists, pad_id, max_len=None): return pb_r3(id_lists, 0, max_len)

@A("pad_batch", "W", "float tensor (torch.tensor on padded lists with pad 0.)")
def pb_w8(id_lists, pad_id, max_len=None): return pb_r3(id_lists, pad_id, max_len).float()
