"""Learner trial round 8a: answers for notebooks 01-07 (R = right, W = wrong)."""
import itertools, math, re, functools
from collections import OrderedDict
import torch
import torch.nn.functional as F
from harness import *

# ---------------- 01 broadcast_shape ----------------
@A('broadcast_shape', 'R', 'zip_longest over reversed shapes')
def bs_r1(a, b):
    out = []
    for i, (x, y) in enumerate(itertools.zip_longest(reversed(a), reversed(b), fillvalue=1)):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"axis {-i-1}: sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))

@A('broadcast_shape', 'R', 'recursive on the last axis')
def bs_r2(a, b):
    a, b = tuple(a), tuple(b)
    if not a: return b
    if not b: return a
    x, y = a[-1], b[-1]
    if x == y or y == 1: last = x
    elif x == 1: last = y
    else: raise ValueError(f"sizes {x} and {y} clash")
    return bs_r2(a[:-1], b[:-1]) + (last,)

@A('broadcast_shape', 'R', 'pad lists with 1 then while loop')
def bs_r3(a, b):
    a, b = list(a), list(b)
    n = max(len(a), len(b))
    a = [1] * (n - len(a)) + a; b = [1] * (n - len(b)) + b
    res = []; i = 0
    while i < n:
        if a[i] == 1: res.append(b[i])
        elif b[i] == 1 or b[i] == a[i]: res.append(a[i])
        else: raise ValueError("size %d and size %d clash at axis %d" % (a[i], b[i], i - n))
        i += 1
    return tuple(res)

@A('broadcast_shape', 'W', 'max() when one is 1 or equal (0 vs 1 -> 1)')
def bs_w1(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x != y and 1 not in (x, y): raise ValueError(f"sizes {x} and {y} clash")
        out.append(max(x, y))
    return tuple(reversed(out))

@A('broadcast_shape', 'W', 'compares with is')
def bs_w2(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x is y or y is 1: out.append(x)
        elif x is 1: out.append(y)
        else: raise ValueError(f"sizes {x} and {y} clash")
    return tuple(reversed(out))

@A('broadcast_shape', 'W', 'aligns from the left')
def bs_w3(a, b):
    out = []
    for x, y in itertools.zip_longest(a, b, fillvalue=1):
        if x != y and x != 1 and y != 1: raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(out)

@A('broadcast_shape', 'W', 'returns a list')
def bs_w4(a, b): return list(bs_r1(a, b))

@A('broadcast_shape', 'W', 'message without sizes')
def bs_w5(a, b):
    try: return bs_r1(a, b)
    except ValueError: raise ValueError("shapes do not broadcast") from None

@A('broadcast_shape', 'W', 'min(x,y)==1 test: (1,0) raises')
def bs_w6(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x == y: out.append(x)
        elif min(x, y) == 1: out.append(max(x, y))
        else: raise ValueError(f"sizes {x} and {y} clash")
    return tuple(reversed(out))

@A('broadcast_shape', 'W', 'TypeError instead of ValueError')
def bs_w7(a, b):
    try: return bs_r1(a, b)
    except ValueError as e: raise TypeError(str(e)) from None

@A('broadcast_shape', 'R', 'shorter shape padded with the other shape s leading sizes (equivalent: v against v gives v)')
def bs_w8(a, b):
    # pads the shorter shape with the OTHER shape's leading sizes instead of 1
    a, b = tuple(a), tuple(b)
    if len(a) < len(b): a = b[:len(b) - len(a)] + a
    elif len(b) < len(a): b = a[:len(a) - len(b)] + b
    return bs_r1(a, b)

# ---------------- 02 tokenization ----------------
SPECIALS4 = ("<pad>", "<bos>", "<eos>", "<unk>")

@A('build_vocab', 'R', 'dict.fromkeys over chain')
def bv_r1(sentences, specials=SPECIALS4):
    toks = dict.fromkeys(itertools.chain(specials, (t for s in sentences for t in s.split())))
    return {t: i for i, t in enumerate(toks)}

@A('build_vocab', 'R', 'loop with not in')
def bv_r2(sentences, specials=SPECIALS4):
    v = {}
    for t in list(specials) + [w for s in sentences for w in s.split()]:
        if t not in v: v[t] = len(v)
    return v

@A('build_vocab', 'R', 'OrderedDict, list of seen words, ids by counter')
def bv_r3(sentences, specials=SPECIALS4):
    v = OrderedDict(); n = 0
    for sp in specials:
        if sp not in v: v[sp] = n; n += 1
    for s in sentences:
        for w in s.split():
            if w not in v: v[w] = n; n += 1
    return dict(v)

@A('build_vocab', 'W', "split(' ')")
def bv_w1(sentences, specials=SPECIALS4):
    v = {t: i for i, t in enumerate(specials)}
    for s in sentences:
        for w in s.split(' '):
            v.setdefault(w, len(v))
    return v

@A('build_vocab', 'W', 'sorted words')
def bv_w2(sentences, specials=SPECIALS4):
    v = {t: i for i, t in enumerate(specials)}
    for w in sorted({w for s in sentences for w in s.split()}):
        v.setdefault(w, len(v))
    return v

@A('build_vocab', 'W', 'lower-cases')
def bv_w3(sentences, specials=SPECIALS4):
    return bv_r2([s.lower() for s in sentences], specials)

@A('build_vocab', 'W', 'strips punctuation')
def bv_w4(sentences, specials=SPECIALS4):
    return bv_r2([re.sub(r"[^\w\s<>]", "", s) for s in sentences], specials)

@A('build_vocab', 'W', 'specials hard-coded')
def bv_w5(sentences, specials=SPECIALS4):
    return bv_r2(sentences, SPECIALS4)

@A('build_vocab', 'W', 'update overwrites a special typed in text')
def bv_w6(sentences, specials=SPECIALS4):
    v = {t: i for i, t in enumerate(specials)}
    uniq = list(dict.fromkeys(w for s in sentences for w in s.split()))
    v.update({w: i + len(specials) for i, w in enumerate(uniq)})
    return v

_bv_global = {}
@A('build_vocab', 'W', 'module-global vocab kept between calls')
def bv_w7(sentences, specials=SPECIALS4):
    for t in list(specials) + [w for s in sentences for w in s.split()]:
        _bv_global.setdefault(t, len(_bv_global))
    return dict(_bv_global)

@A('build_vocab', 'W', 'words numbered by their index among unique words ignoring specials order')
def bv_w8(sentences, specials=SPECIALS4):
    v = {t: i for i, t in enumerate(specials)}
    uniq = [w for w in dict.fromkeys(w for s in sentences for w in s.split()) if w not in v]
    for i, w in enumerate(uniq): v[w] = 4 + i   # assumes 4 specials
    return v

@A('encode', 'R', 'comprehension with get')
def en_r1(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t, vocab["<unk>"]) for t in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])

@A('encode', 'R', 'try/except KeyError loop')
def en_r2(sentence, vocab, add_bos=False, add_eos=False):
    out = []
    if add_bos: out.append(vocab["<bos>"])
    for t in sentence.split():
        try: out.append(vocab[t])
        except KeyError: out.append(vocab["<unk>"])
    if add_eos: out.append(vocab["<eos>"])
    return out

@A('encode', 'R', 'list multiplied by bool, re.findall \\S+')
def en_r3(sentence, vocab, add_bos=False, add_eos=False):
    unk = vocab["<unk>"]
    return ([vocab["<bos>"]] * bool(add_bos) + [vocab[t] if t in vocab else unk for t in re.findall(r"\S+", sentence)]
            + [vocab["<eos>"]] * bool(add_eos))

@A('encode', 'W', "split(' ')")
def en_w1(sentence, vocab, add_bos=False, add_eos=False):
    return en_r1(' '.join(sentence.split(' ')).replace('\t', ' '), vocab, add_bos, add_eos) if False else \
        ([vocab["<bos>"]] if add_bos else []) + [vocab.get(t, vocab["<unk>"]) for t in sentence.split(' ')] + ([vocab["<eos>"]] if add_eos else [])

@A('encode', 'W', 'lower-cases')
def en_w2(sentence, vocab, add_bos=False, add_eos=False):
    return en_r1(sentence.lower(), vocab, add_bos, add_eos)

@A('encode', 'W', 'unk hard-coded 3')
def en_w3(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t, 3) for t in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])

@A('encode', 'W', 'bos 1 / eos 2 hard-coded')
def en_w4(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t, vocab["<unk>"]) for t in sentence.split()]
    return ([1] if add_bos else []) + ids + ([2] if add_eos else [])

@A('encode', 'W', 'typed special tokens -> unk')
def en_w5(sentence, vocab, add_bos=False, add_eos=False):
    unk = vocab["<unk>"]
    ids = [unk if t in SPECIALS4 else vocab.get(t, unk) for t in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])

@A('encode', 'W', 'strips punctuation off words')
def en_w6(sentence, vocab, add_bos=False, add_eos=False):
    return en_r1(' '.join(t.strip('.,!?;:') or t for t in sentence.split()), vocab, add_bos, add_eos)

@A('encode', 'W', 'mutable default list accumulates')
def en_w7(sentence, vocab, add_bos=False, add_eos=False, _out=[]):
    if add_bos: _out.append(vocab["<bos>"])
    _out.extend(vocab.get(t, vocab["<unk>"]) for t in sentence.split())
    if add_eos: _out.append(vocab["<eos>"])
    return _out

@A('encode', 'W', 'eos before bos when both (insert(0) order mix-up)')
def en_w8(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t, vocab["<unk>"]) for t in sentence.split()]
    if add_eos: ids.append(vocab["<eos>"])
    if add_bos: ids.insert(len(ids) - 1 if add_eos and len(ids) > 1 else 0, vocab["<bos>"])
    return ids

@A('encode', 'W', 'unknown -> get() without default (None)')
def en_w9(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t) for t in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])

@A('decode', 'R', 'invert then loop, int() each id')
def de_r1(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in ids:
        t = inv[int(i)]
        if skip_specials and t == "<eos>": break
        if skip_specials and t in SPECIALS4: continue
        out.append(t)
    return " ".join(out)

@A('decode', 'R', 'tolist, cut at first eos via index, then filter')
def de_r2(ids, vocab, skip_specials=True):
    ids = ids.tolist() if isinstance(ids, torch.Tensor) else [int(i) for i in ids]
    inv = dict(map(reversed, vocab.items()))
    toks = [inv[i] for i in ids]
    if skip_specials:
        if "<eos>" in toks: toks = toks[:toks.index("<eos>")]
        toks = [t for t in toks if t not in ("<pad>", "<bos>", "<unk>")]
    return " ".join(toks)

@A('decode', 'R', 'itertools.takewhile, string accumulation')
def de_r3(ids, vocab, skip_specials=True):
    inv = {}
    for t, i in vocab.items(): inv[i] = t
    toks = (inv[int(i)] for i in ids)
    if skip_specials:
        toks = (t for t in itertools.takewhile(lambda t: t != "<eos>", toks) if t not in set(SPECIALS4))
    s = ""
    for t in toks: s += (" " if s or False else "") + t if s else t
    return s

@A('decode', 'W', 'does not stop at eos')
def de_w1(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    return " ".join(t for t in (inv[int(i)] for i in ids) if not (skip_specials and t in SPECIALS4))

@A('decode', 'W', 'stops at eos even when keeping specials')
def de_w2(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}; out = []
    for i in ids:
        t = inv[int(i)]
        if t == "<eos>": break
        if skip_specials and t in SPECIALS4: continue
        out.append(t)
    return " ".join(out)

@A('decode', 'W', 'position in dict instead of id')
def de_w3(ids, vocab, skip_specials=True):
    keys = list(vocab); out = []
    for i in ids:
        t = keys[int(i)]
        if skip_specials and t == "<eos>": break
        if skip_specials and t in SPECIALS4: continue
        out.append(t)
    return " ".join(out)

@A('decode', 'W', 'special ids hard-coded 0..3')
def de_w4(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}; out = []
    for i in ids:
        i = int(i)
        if skip_specials and i == 2: break
        if skip_specials and i in (0, 1, 3): continue
        out.append(inv[i])
    return " ".join(out)

@A('decode', 'W', 'skips anything that looks like <...>')
def de_w5(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}; out = []
    for i in ids:
        t = inv[int(i)]
        if skip_specials and t == "<eos>": break
        if skip_specials and t.startswith("<") and t.endswith(">"): continue
        out.append(t)
    return " ".join(out)

@A('decode', 'W', 'vocab["<eos>"] looked up (crash without eos)')
def de_w6(ids, vocab, skip_specials=True):
    eos = vocab["<eos>"]; inv = {i: t for t, i in vocab.items()}; out = []
    specials = {vocab[s] for s in SPECIALS4 if s in vocab}
    for i in ids:
        i = int(i)
        if skip_specials and i == eos: break
        if skip_specials and i in specials: continue
        out.append(inv[i])
    return " ".join(out)

@A('decode', 'W', 'tensor elements used as dict keys')
def de_w7(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}; out = []
    for i in ids:
        t = inv[i]
        if skip_specials and t == "<eos>": break
        if skip_specials and t in SPECIALS4: continue
        out.append(t)
    return " ".join(out)

@A('decode', 'W', 'trailing space')
def de_w8(ids, vocab, skip_specials=True):
    s = ""
    for t in de_r1(ids, vocab, skip_specials).split(" "):
        if t: s += t + " "
    return s

@A('decode', 'W', 'skips every occurrence of eos instead of stopping')
def de_w9(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    toks = [inv[int(i)] for i in ids]
    if skip_specials:
        toks = [t for t in toks if t not in SPECIALS4]
    return " ".join(toks)

@A('pad_batch', 'R', 'torch.full then row copy')
def pb_r1(id_lists, pad_id, max_len=None):
    if len(id_lists) == 0: raise ValueError("id_lists: empty batch")
    L = max_len if max_len is not None else max(len(r) for r in id_lists)
    out = torch.full((len(id_lists), L), pad_id, dtype=torch.long)
    for b, r in enumerate(id_lists):
        r = [int(i) for i in r][:L]
        if r: out[b, :len(r)] = torch.tensor(r, dtype=torch.long)
    return out

@A('pad_batch', 'R', 'pure Python lists then torch.tensor')
def pb_r2(id_lists, pad_id, max_len=None):
    if not len(id_lists): raise ValueError("id_lists: expected at least one list")
    L = max(map(len, id_lists)) if max_len is None else max_len
    rows = [[int(i) for i in r][:L] + [pad_id] * (L - min(len(r), L)) for r in id_lists]
    return torch.tensor(rows, dtype=torch.long).reshape(len(rows), L)

@A('pad_batch', 'R', 'pad_sequence then F.pad / slice')
def pb_r3(id_lists, pad_id, max_len=None):
    if len(id_lists) == 0: raise ValueError("id_lists: empty")
    seqs = [torch.tensor([int(i) for i in r], dtype=torch.long) for r in id_lists]
    out = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=pad_id)
    if out.dim() == 1: out = out.reshape(len(seqs), 0)
    if max_len is not None:
        out = out[:, :max_len]
        out = F.pad(out, (0, max_len - out.size(1)), value=pad_id)
    return out

@A('pad_batch', 'W', 'pads on the left')
def pb_w1(id_lists, pad_id, max_len=None):
    if len(id_lists) == 0: raise ValueError("empty")
    L = max_len if max_len is not None else max(len(r) for r in id_lists)
    return torch.tensor([[pad_id] * (L - len(list(r)[:L])) + list(r)[:L] for r in id_lists], dtype=torch.long).reshape(len(id_lists), L)

@A('pad_batch', 'W', 'int32 dtype')
def pb_w2(id_lists, pad_id, max_len=None): return pb_r1(id_lists, pad_id, max_len).int()

@A('pad_batch', 'W', 'L = min(max_len, longest)')
def pb_w3(id_lists, pad_id, max_len=None):
    longest = max(len(r) for r in id_lists) if len(id_lists) else 0
    return pb_r1(id_lists, pad_id, longest if max_len is None else min(max_len, longest) or max_len)

@A('pad_batch', 'W', 'empty batch -> empty tensor')
def pb_w4(id_lists, pad_id, max_len=None):
    if len(id_lists) == 0: return torch.zeros(0, max_len or 0, dtype=torch.long)
    return pb_r1(id_lists, pad_id, max_len)

@A('pad_batch', 'W', 'extends the input lists in place')
def pb_w5(id_lists, pad_id, max_len=None):
    if len(id_lists) == 0: raise ValueError("empty")
    L = max_len if max_len is not None else max(len(r) for r in id_lists)
    for r in id_lists:
        if isinstance(r, list): r.extend([pad_id] * (L - len(r)))
    return torch.tensor([list(r)[:L] + [pad_id] * (L - len(list(r)[:L])) for r in id_lists], dtype=torch.long).reshape(len(id_lists), L)

@A('pad_batch', 'W', 'pads with 0 not pad_id')
def pb_w6(id_lists, pad_id, max_len=None): return pb_r1(id_lists, 0, max_len)

@A('pad_batch', 'W', 'no truncation when max_len is shorter')
def pb_w7(id_lists, pad_id, max_len=None):
    longest = max(len(r) for r in id_lists) if len(id_lists) else 0
    return pb_r1(id_lists, pad_id, max(longest, max_len or 0) if len(id_lists) else max_len)

@A('pad_batch', 'W', 'max_len is a floor of the longest row length check "if max_len" (truthy)')
def pb_w8(id_lists, pad_id, max_len=None):
    if len(id_lists) == 0: raise ValueError("empty")
    L = max(len(r) for r in id_lists)
    if max_len and max_len < L: L = max_len
    return pb_r1(id_lists, pad_id, L)
generics('pad_batch', pb_r1, ['idcache', 'buffer'])

# ---------------- 04 masks ----------------
@A('padding_mask', 'R', 'ne + unsqueeze twice')
def pm_r1(token_ids, pad_id): return torch.ne(token_ids, pad_id).unsqueeze(1).unsqueeze(1)

@A('padding_mask', 'R', '(ids - pad).bool() reshaped')
def pm_r2(token_ids, pad_id):
    B, L = token_ids.shape
    return (token_ids - pad_id).bool().reshape(B, 1, 1, L)

@A('padding_mask', 'R', 'logical_not of eq, view via [:, None, None]')
def pm_r3(token_ids, pad_id): return torch.logical_not(token_ids == pad_id)[:, None, None, :]

@A('padding_mask', 'W', '== pad (inverted)')
def pm_w1(token_ids, pad_id): return (token_ids == pad_id)[:, None, None]

@A('padding_mask', 'W', '(B, 1, L, 1)')
def pm_w2(token_ids, pad_id): return (token_ids != pad_id)[:, None, :, None]

@A('padding_mask', 'W', '(B, 1, L)')
def pm_w3(token_ids, pad_id): return (token_ids != pad_id)[:, None]

@A('padding_mask', 'W', 'long instead of bool')
def pm_w4(token_ids, pad_id): return (token_ids != pad_id).long()[:, None, None]

@A('padding_mask', 'W', 'pad hard-coded 0')
def pm_w5(token_ids, pad_id): return (token_ids != 0)[:, None, None]

@A('padding_mask', 'W', 'ids > pad (pad assumed smallest)')
def pm_w6(token_ids, pad_id): return (token_ids > pad_id)[:, None, None]

@A('padding_mask', 'W', 'uint8 mask')
def pm_w7(token_ids, pad_id): return (token_ids != pad_id).to(torch.uint8)[:, None, None]
generics('padding_mask', pm_r1, ['idcache', 'buffer', 'counter'])

@A('causal_mask', 'R', 'arange comparison')
def cm_r1(seq_len):
    i = torch.arange(seq_len)
    return (i[None, :] <= i[:, None])[None, None]

@A('causal_mask', 'R', 'not triu(diagonal=1)')
def cm_r2(seq_len): return ~torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1).view(1, 1, seq_len, seq_len)

@A('causal_mask', 'R', 'eye cumsum along rows')
def cm_r3(seq_len): return torch.eye(seq_len).cumsum(0).bool().unsqueeze(0).unsqueeze(0)

@A('causal_mask', 'R', 'float tril then > 0.5')
def cm_r4(seq_len): return (torch.tril(torch.ones(1, 1, seq_len, seq_len)) > 0.5)

@A('causal_mask', 'W', 'upper triangle')
def cm_w1(seq_len): return torch.ones(seq_len, seq_len, dtype=torch.bool).triu()[None, None]

@A('causal_mask', 'W', 'diagonal excluded')
def cm_w2(seq_len): return torch.ones(seq_len, seq_len, dtype=torch.bool).tril(-1)[None, None]

@A('causal_mask', 'W', '(L, L) only')
def cm_w3(seq_len): return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()

@A('causal_mask', 'W', 'additive float mask 0/-inf')
def cm_w4(seq_len): return torch.zeros(seq_len, seq_len).masked_fill(torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1), float('-inf'))[None, None]

_CM = torch.ones(512, 512, dtype=torch.bool).tril()
@A('causal_mask', 'W', '512x512 buffer sliced')
def cm_w5(seq_len): return _CM[:seq_len, :seq_len][None, None]

@A('causal_mask', 'W', 'diagonal=1 (sees next token)')
def cm_w6(seq_len): return torch.ones(seq_len, seq_len, dtype=torch.bool).tril(1)[None, None]

@A('causal_mask', 'W', 'lru_cache (shared tensor)')
@functools.lru_cache(maxsize=None)
def cm_w7(seq_len): return cm_r1(seq_len)

@A('causal_mask', 'W', 'i < j comparison (future, off by direction)')
def cm_w8(seq_len):
    i = torch.arange(seq_len)
    return (i[None, :] >= i[:, None])[None, None]

@A('target_mask', 'R', 'my padding & my causal')
def tm_r1(token_ids, pad_id): return pm_r2(token_ids, pad_id) & cm_r3(token_ids.size(1))

@A('target_mask', 'R', 'arange comparison and key mask, one expression')
def tm_r2(token_ids, pad_id):
    L = token_ids.size(1); i = torch.arange(L, device=token_ids.device)
    return ((i[None, :] <= i[:, None])[None] & (token_ids != pad_id)[:, None, :]).unsqueeze(1)

@A('target_mask', 'R', 'logical_and with explicit expand')
def tm_r3(token_ids, pad_id):
    B, L = token_ids.shape
    pad = (token_ids != pad_id).view(B, 1, 1, L).expand(B, 1, L, L)
    causal = torch.ones(L, L, dtype=torch.bool).tril().expand(B, 1, L, L)
    return torch.logical_and(pad, causal).clone()

@A('target_mask', 'W', 'or instead of and')
def tm_w1(token_ids, pad_id): return pm_r1(token_ids, pad_id) | cm_r1(token_ids.size(1))

@A('target_mask', 'W', 'padding on query rows')
def tm_w2(token_ids, pad_id): return (token_ids != pad_id)[:, None, :, None] & cm_r1(token_ids.size(1))

@A('target_mask', 'W', 'padding on rows and keys')
def tm_w3(token_ids, pad_id):
    p = token_ids != pad_id
    return p[:, None, :, None] & p[:, None, None, :] & cm_r1(token_ids.size(1))

@A('target_mask', 'W', '(B, L, L) no heads axis')
def tm_w4(token_ids, pad_id): return (pm_r1(token_ids, pad_id) & cm_r1(token_ids.size(1)))[:, 0]

@A('target_mask', 'W', 'causal only, expanded to B')
def tm_w5(token_ids, pad_id):
    B, L = token_ids.shape
    return cm_r1(L).expand(B, 1, L, L).clone()

@A('target_mask', 'W', 'size(0) used as L')
def tm_w6(token_ids, pad_id): return pm_r1(token_ids, pad_id) & cm_r1(token_ids.size(0))

@A('target_mask', 'W', 'causal with triu (future visible)')
def tm_w7(token_ids, pad_id): return pm_r1(token_ids, pad_id) & cm_w1(token_ids.size(1))

@A('target_mask', 'W', 'pad id hard-coded 0')
def tm_w8(token_ids, pad_id): return pm_w5(token_ids, pad_id) & cm_r1(token_ids.size(1))
generics('target_mask', tm_r1, ['idcache', 'buffer'])

# ---------------- 03 embeddings ----------------
@A('embed', 'R', 'index_select on flattened ids, Python float scale')
def em_r1(token_ids, table, scale=True):
    out = torch.index_select(table, 0, token_ids.reshape(-1)).reshape(*token_ids.shape, table.size(1))
    return out * math.sqrt(table.size(1)) if scale else out

@A('embed', 'R', 'float64 inside, cast back')
def em_r2(token_ids, table, scale=True):
    out = table.double()[token_ids]
    if scale: out = out * table.shape[-1] ** 0.5
    return out.to(table.dtype)

@A('embed', 'R', 'sqrt(D) as a tensor of the table dtype')
def em_r3(token_ids, table, scale=True):
    out = table[token_ids]
    if scale: out = out * torch.tensor(float(table.size(1)), dtype=table.dtype).sqrt()
    return out

@A('embed', 'W', 'F.embedding then mul in float32 (float64 input loses precision; label corrected from R)')
def em_r4(token_ids, table, scale=True):
    out = F.embedding(token_ids, table)
    return (out.float() * torch.sqrt(torch.tensor(float(table.size(1))))).to(table.dtype) if scale else out

@A('embed', 'W', 'scaled by D')
def em_w1(token_ids, table, scale=True):
    return table[token_ids] * table.size(1) if scale else table[token_ids]

@A('embed', 'W', 'scale argument ignored')
def em_w2(token_ids, table, scale=True): return table[token_ids] * math.sqrt(table.size(1))

@A('embed', 'W', 'sqrt(V) (rows) instead of sqrt(D)')
def em_w3(token_ids, table, scale=True):
    return table[token_ids] * math.sqrt(table.size(0)) if scale else table[token_ids]

@A('embed', 'W', 'table scaled in place')
def em_w4(token_ids, table, scale=True):
    if scale: table.mul_(math.sqrt(table.size(1)))
    return table[token_ids].clone()

@A('embed', 'W', 'sqrt(16) hard-coded')
def em_w5(token_ids, table, scale=True): return table[token_ids] * 4.0 if scale else table[token_ids]

@A('embed', 'W', 'flattened (B*L, D)')
def em_w6(token_ids, table, scale=True):
    out = table[token_ids.reshape(-1)]
    return out * math.sqrt(table.size(1)) if scale else out

@A('embed', 'W', 'sqrt(D) rounded to int')
def em_w7(token_ids, table, scale=True):
    return table[token_ids] * int(math.sqrt(table.size(1))) if scale else table[token_ids]

@A('embed', 'W', 'unscaled returns the table rows as a view? (returns table itself when ids cover all) -> divide instead')
def em_w8(token_ids, table, scale=True):
    return table[token_ids] / math.sqrt(table.size(1)) if scale else table[token_ids]
generics('embed', em_r1, ['f32', 'idcache', 'buffer', 'shapecache'])

def _pe64(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    i2 = torch.arange(0, d_model, 2, dtype=torch.float64)
    return pos * 10000.0 ** (-i2 / d_model)

@A('sinusoidal_positional_encoding', 'R', 'Python math loops, float64 list')
def sp_r1(max_len, d_model):
    rows = []
    for p in range(max_len):
        r = []
        for i in range(d_model // 2):
            a = p * 10000 ** (-2 * i / d_model)
            r += [math.sin(a), math.cos(a)]
        rows.append(r)
    return torch.tensor(rows, dtype=torch.float64).float().reshape(max_len, d_model)

@A('sinusoidal_positional_encoding', 'R', 'Annotated Transformer: exp(-log(10000)) in float32')
def sp_r2(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len).unsqueeze(1).float()
    div = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div)
    pe[:, 1::2] = torch.cos(position * div)
    return pe

@A('sinusoidal_positional_encoding', 'R', 'complex exponential, float64, interleave with stack')
def sp_r3(max_len, d_model):
    z = torch.polar(torch.ones(max_len, d_model // 2, dtype=torch.float64), _pe64(max_len, d_model))
    return torch.stack((z.imag, z.real), dim=-1).flatten(-2).to(torch.float32)

@A('sinusoidal_positional_encoding', 'R', 'float64 angle, division by the power')
def sp_r4(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    denom = torch.pow(10000.0, torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    ang = pos / denom
    return torch.cat([torch.sin(ang)[..., None], torch.cos(ang)[..., None]], -1).view(max_len, d_model).float()

@A('sinusoidal_positional_encoding', 'W', 'sin and cos swapped')
def sp_w1(max_len, d_model):
    a = _pe64(max_len, d_model)
    return torch.stack((a.cos(), a.sin()), -1).flatten(-2).float()

@A('sinusoidal_positional_encoding', 'W', 'halves concatenated, not interleaved')
def sp_w2(max_len, d_model):
    a = _pe64(max_len, d_model)
    return torch.cat((a.sin(), a.cos()), -1).float()

@A('sinusoidal_positional_encoding', 'W', 'column index j used in the exponent for both sin and cos')
def sp_w3(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    j = torch.arange(d_model, dtype=torch.float64)
    a = pos * 10000.0 ** (-j / d_model)
    pe = a.sin(); pe[:, 1::2] = a[:, 1::2].cos()
    return pe.float()

@A('sinusoidal_positional_encoding', 'W', 'base 1000')
def sp_w4(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    a = pos * 1000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.stack((a.sin(), a.cos()), -1).flatten(-2).float()

@A('sinusoidal_positional_encoding', 'W', 'returns float64')
def sp_w5(max_len, d_model):
    a = _pe64(max_len, d_model)
    return torch.stack((a.sin(), a.cos()), -1).flatten(-2)

@A('sinusoidal_positional_encoding', 'W', 'positions start at 1')
def sp_w6(max_len, d_model):
    a = _pe64(max_len + 1, d_model)[1:]
    return torch.stack((a.sin(), a.cos()), -1).flatten(-2).float()

@A('sinusoidal_positional_encoding', 'W', 'integer floor division in the exponent')
def sp_w7(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    a = pos * 10000.0 ** (-(torch.arange(0, d_model, 2) // d_model).double())
    return torch.stack((a.sin(), a.cos()), -1).flatten(-2).float()

@A('sinusoidal_positional_encoding', 'W', 'angle in half precision')
def sp_w8(max_len, d_model):
    a = _pe64(max_len, d_model).half().float()
    return torch.stack((a.sin(), a.cos()), -1).flatten(-2)

@A('sinusoidal_positional_encoding', 'W', 'exponent -i/d (i = pair index, missing the 2)')
def sp_w9(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    a = pos * 10000.0 ** (-torch.arange(d_model // 2, dtype=torch.float64) / d_model)
    return torch.stack((a.sin(), a.cos()), -1).flatten(-2).float()
generics('sinusoidal_positional_encoding', sp_r4, ['idcache', 'buffer', 'shapecache'])

@A('add_positional_encoding', 'R', 'narrow + unsqueeze')
def ap_r1(x, pe): return torch.add(x, pe.narrow(0, 0, x.size(1)).unsqueeze(0))

@A('add_positional_encoding', 'R', 'float64 inside, cast back')
def ap_r2(x, pe): return (x.double() + pe[: x.shape[1]].double()).to(x.dtype)

@A('add_positional_encoding', 'R', 'loop over the batch, stack')
def ap_r3(x, pe): return torch.stack([x[b] + pe[: x.size(1)] for b in range(x.size(0))])

@A('add_positional_encoding', 'W', 'expand_as then add, float32 inside (float64 input loses precision; label corrected from R)')
def ap_r4(x, pe): return (x.float() + pe[: x.size(1)].expand_as(x).float()).to(x.dtype)

@A('add_positional_encoding', 'W', 'pe sliced by batch size')
def ap_w1(x, pe): return x + pe[: x.size(0)].unsqueeze(1) if x.size(0) != 1 else x + pe[:1]

@A('add_positional_encoding', 'W', 'in place x +=')
def ap_w2(x, pe):
    x += pe[: x.size(1)]
    return x

@A('add_positional_encoding', 'W', 'pe[:L, None] (L, 1, D)')
def ap_w3(x, pe): return x + pe[: x.size(1), None]

@A('add_positional_encoding', 'W', 'whole pe added (assumes max_len == L)')
def ap_w4(x, pe): return x + pe

@A('add_positional_encoding', 'W', 'pe scaled by sqrt(D)')
def ap_w5(x, pe): return x + pe[: x.size(1)] * math.sqrt(x.size(-1))

@A('add_positional_encoding', 'W', 'pe rows from the end')
def ap_w6(x, pe): return x + pe[-x.size(1):]

@A('add_positional_encoding', 'W', 'pe slice computed in pe dtype then result in pe dtype? (x.float())')
def ap_w7(x, pe): return x.float() + pe[: x.size(1)].float()

@A('add_positional_encoding', 'W', 'L taken from x.size(-2) of a transposed guess: x.shape[2]')
def ap_w8(x, pe): return x + pe[: x.shape[2]][: x.shape[1]] * 0 + pe[1: x.size(1) + 1] if pe.size(0) > x.size(1) else x + pe[: x.size(1)]
generics('add_positional_encoding', ap_r1, ['mutate', 'idcache', 'buffer'])

def _rope_angle64(L, D, positions, device=None):
    pos = torch.arange(L, dtype=torch.float64) if positions is None else positions.to(torch.float64)
    return pos[:, None] * 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)

@A('apply_rope', 'R', 'complex multiplication in float64, cast back')
def ar_r1(x, positions=None):
    L, D = x.shape[-2:]
    a = _rope_angle64(L, D, positions)
    z = torch.view_as_complex(x.to(torch.float64).contiguous().reshape(*x.shape[:-1], D // 2, 2))
    out = torch.view_as_real(z * torch.polar(torch.ones_like(a), a)).reshape(x.shape)
    return out.to(x.dtype)

@A('apply_rope', 'R', 'even/odd slices written into empty_like, float64 angle')
def ar_r2(x, positions=None):
    L, D = x.shape[-2:]
    a = _rope_angle64(L, D, positions)
    c, s = a.cos().to(x.dtype), a.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out

@A('apply_rope', 'W', '2x2 rotation matrices with einsum, float32 inside (float64 loses precision; label corrected from R)')
def ar_r3(x, positions=None):
    L, D = x.shape[-2:]
    a = _rope_angle64(L, D, positions)
    c, s = a.cos(), a.sin()
    R = torch.stack((torch.stack((c, -s), -1), torch.stack((s, c), -1)), -2).float()   # (L, D/2, 2, 2)
    pairs = x.float().reshape(*x.shape[:-1], D // 2, 2)
    return torch.einsum('lpij,...lpj->...lpi', R, pairs).reshape(x.shape).to(x.dtype)

@A('apply_rope', 'W', 'float32 angles (LLaMA style), x in float32 (float64 loses precision; label corrected from R)')
def ar_r4(x, positions=None):
    L, D = x.shape[-2:]
    pos = torch.arange(L, dtype=torch.float32) if positions is None else positions.float()
    inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2).float() / D))
    a = torch.outer(pos, inv)
    xf = x.float(); x0, x1 = xf[..., 0::2], xf[..., 1::2]
    return torch.stack((x0 * a.cos() - x1 * a.sin(), x0 * a.sin() + x1 * a.cos()), -1).flatten(-2).to(x.dtype)

def _rope_pairs(x, a, sign=1.0):
    c, s = a.cos().to(x.dtype), (sign * a.sin()).to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).flatten(-2)

@A('apply_rope', 'W', 'rotate-half pairing (i, i + D/2)')
def ar_w1(x, positions=None):
    L, D = x.shape[-2:]
    a = _rope_angle64(L, D, positions)
    c = torch.cat((a.cos(), a.cos()), -1).to(x.dtype); s = torch.cat((a.sin(), a.sin()), -1).to(x.dtype)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * c + torch.cat((-x2, x1), -1) * s

@A('apply_rope', 'W', 'rotation by -a')
def ar_w2(x, positions=None):
    L, D = x.shape[-2:]
    return _rope_pairs(x, _rope_angle64(L, D, positions), -1.0)

@A('apply_rope', 'W', 'positions argument ignored')
def ar_w3(x, positions=None):
    L, D = x.shape[-2:]
    return _rope_pairs(x, _rope_angle64(L, D, None))

@A('apply_rope', 'W', 'exponent -i/D (pair index without the 2)')
def ar_w4(x, positions=None):
    L, D = x.shape[-2:]
    pos = torch.arange(L, dtype=torch.float64) if positions is None else positions.double()
    a = pos[:, None] * 10000.0 ** (-torch.arange(D // 2, dtype=torch.float64) / D)
    return _rope_pairs(x, a)

@A('apply_rope', 'W', 'L read from x.shape[1] (3-D thinking)')
def ar_w5(x, positions=None):
    L, D = x.shape[1], x.shape[-1]
    a = _rope_angle64(L, D, positions)
    if a.size(0) != x.size(-2): a = _rope_angle64(x.size(-2), D, None) * 0 + _rope_angle64(L, D, None)[: x.size(-2)] if L >= x.size(-2) else _rope_angle64(x.size(-2), D, None) * 0
    return _rope_pairs(x, a)

@A('apply_rope', 'W', 'writes the result into x')
def ar_w6(x, positions=None):
    L, D = x.shape[-2:]
    out = _rope_pairs(x, _rope_angle64(L, D, positions))
    x.copy_(out)
    return x

@A('apply_rope', 'W', 'angle rounded to x dtype before cos/sin')
def ar_w7(x, positions=None):
    L, D = x.shape[-2:]
    a = _rope_angle64(L, D, positions).to(x.dtype).double()
    return _rope_pairs(x, a)

@A('apply_rope', 'W', 'positions None -> starts at 1')
def ar_w8(x, positions=None):
    L, D = x.shape[-2:]
    pos = torch.arange(1, L + 1) if positions is None else positions
    return _rope_pairs(x, _rope_angle64(L, D, pos))

@A('apply_rope', 'W', 'pairs (x[i], x[D-1-i]) reversed order')
def ar_w9(x, positions=None):
    L, D = x.shape[-2:]
    a = _rope_angle64(L, D, positions)
    c, s = a.cos().to(x.dtype), a.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c + x1 * s, -x0 * s + x1 * c), -1).flatten(-2)
generics('apply_rope', ar_r2, ['f32', 'idcache', 'buffer'])

def _up(t):  # at least float32 inside: half inputs gain precision, float64 keeps its own
    return t.to(torch.promote_types(t.dtype, torch.float32))

@A('embed', 'R', 'F.embedding, scale via torch.sqrt in at least float32')
def em_r5(token_ids, table, scale=True):
    out = _up(F.embedding(token_ids, table))
    return (out * torch.sqrt(torch.tensor(float(table.size(1)), dtype=out.dtype))).to(table.dtype) if scale else out.to(table.dtype)

@A('add_positional_encoding', 'R', 'expand_as then add, at least float32 inside')
def ap_r5(x, pe): return (_up(x) + _up(pe[: x.size(1)]).expand_as(x)).to(x.dtype)

@A('apply_rope', 'R', '2x2 rotation matrices with einsum, at least float32 inside')
def ar_r5(x, positions=None):
    L, D = x.shape[-2:]
    a = _rope_angle64(L, D, positions)
    c, s = a.cos(), a.sin()
    xf = _up(x)
    R = torch.stack((torch.stack((c, -s), -1), torch.stack((s, c), -1)), -2).to(xf.dtype)
    return torch.einsum('lpij,...lpj->...lpi', R, xf.reshape(*x.shape[:-1], D // 2, 2)).reshape(x.shape).to(x.dtype)

@A('apply_rope', 'R', 'stacked own rope: rotate by p in two steps (p = p1 + p2 with p2 = 0)... via rotate_half helper, float64')
def ar_r6(x, positions=None):
    L, D = x.shape[-2:]
    a = torch.repeat_interleave(_rope_angle64(L, D, positions), 2, dim=-1)
    xd = x.double()
    rot = torch.stack((-xd[..., 1::2], xd[..., 0::2]), -1).flatten(-2)
    return (xd * a.cos() + rot * a.sin()).to(x.dtype)

# ---------------- 05 attention ----------------
def _softmax_hand(scores, mask):
    """Softmax over keys written out; a row with no visible key gets zeros."""
    if mask is not None: scores = scores.masked_fill(~mask, float('-inf'))
    m = scores.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(scores - m)
    s = e.sum(-1, keepdim=True)
    return torch.where(s > 0, e / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(e))

@A('scaled_dot_product_attention', 'R', 'hand-written softmax, divide q first')
def at_r1(query, key, value, mask=None):
    scores = (query / math.sqrt(query.size(-1))) @ key.transpose(-2, -1)
    w = _softmax_hand(scores, mask)
    if mask is not None: w = w.masked_fill(~mask, 0.0)
    return w @ value, w

@A('scaled_dot_product_attention', 'R', 'at least float32 inside, cast back')
def at_r2(query, key, value, mask=None):
    q, k, v = _up(query), _up(key), _up(value)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -1).nan_to_num(0.0)
    if mask is not None: w = torch.where(mask, w, 0.0)
    return (w @ v).to(query.dtype), w.to(query.dtype)

@A('scaled_dot_product_attention', 'R', 'einsum, scale after the product, nan_to_num')
def at_r3(query, key, value, mask=None):
    s = torch.einsum('...qd,...kd->...qk', query, key) / math.sqrt(query.shape[-1])
    if mask is not None: s = s.masked_fill(mask.logical_not(), float('-inf'))
    w = torch.softmax(s, dim=-1).nan_to_num(nan=0.0)
    return torch.einsum('...qk,...kd->...qd', w, value), w

@A('scaled_dot_product_attention', 'R', 'log-sum-exp softmax, keys scaled by rsqrt')
def at_r4(query, key, value, mask=None):
    s = query @ (key * (query.size(-1) ** -0.5)).mT
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    lse = torch.logsumexp(s, -1, keepdim=True)
    w = torch.exp(s - lse)
    w = torch.where(torch.isnan(w), torch.zeros_like(w), w)
    return torch.matmul(w, value), w

@A('scaled_dot_product_attention', 'R', 'fill with finfo(dtype).min, then zero masked weights')
def at_r5(query, key, value, mask=None):
    s = query @ key.transpose(-1, -2) / math.sqrt(query.size(-1))
    if mask is not None: s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = s.softmax(-1)
    if mask is not None: w = w * mask
    return w @ value, w

@A('scaled_dot_product_attention', 'W', 'no scaling')
def at_w1(query, key, value, mask=None):
    s = query @ key.transpose(-2, -1)
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -1).nan_to_num(0.0)
    return w @ value, w

@A('scaled_dot_product_attention', 'W', 'scaled by sqrt(d_v)')
def at_w2(query, key, value, mask=None):
    s = query @ key.transpose(-2, -1) / math.sqrt(value.size(-1))
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -1).nan_to_num(0.0)
    return w @ value, w

@A('scaled_dot_product_attention', 'W', 'fill -1e4')
def at_w3(query, key, value, mask=None):
    s = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None: s = s.masked_fill(~mask, -1e4)
    w = torch.softmax(s, -1)
    if mask is not None: w = torch.where(mask, w, 0.0)
    return w @ value, w

@A('scaled_dot_product_attention', 'W', 'fully masked row left NaN')
def at_w4(query, key, value, mask=None):
    s = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -1)
    return w @ value, w

@A('scaled_dot_product_attention', 'W', 'softmax over dim=-2')
def at_w5(query, key, value, mask=None):
    s = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -2).nan_to_num(0.0)
    return w @ value, w

@A('scaled_dot_product_attention', 'R', 'three transposes that amount to transpose(-2, -1) on 4-D (label corrected from W)')
def at_w6(query, key, value, mask=None):
    s = query @ key.transpose(1, 2) / math.sqrt(query.size(-1)) if key.dim() == 3 else query @ key.transpose(1, 3).transpose(2, 3).transpose(1, 2) / math.sqrt(query.size(-1))
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -1).nan_to_num(0.0)
    return w @ value, w

@A('scaled_dot_product_attention', 'W', 'key reshaped instead of transposed')
def at_w7(query, key, value, mask=None):
    s = query @ key.reshape(*key.shape[:-2], key.size(-1), key.size(-2)) / math.sqrt(query.size(-1))
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -1).nan_to_num(0.0)
    return w @ value, w

@A('scaled_dot_product_attention', 'W', 'query scaled in place')
def at_w8(query, key, value, mask=None):
    query /= math.sqrt(query.size(-1))
    s = query @ key.transpose(-2, -1)
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -1).nan_to_num(0.0)
    return w @ value, w

@A('scaled_dot_product_attention', 'W', 'exp without max subtraction')
def at_w9(query, key, value, mask=None):
    s = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    e = torch.exp(s)
    if mask is not None: e = e * mask
    tot = e.sum(-1, keepdim=True)
    w = torch.where(tot > 0, e / tot, torch.zeros_like(e))
    return w @ value, w

@A('scaled_dot_product_attention', 'W', 'weights multiplied by mask after softmax, no renormalising')
def at_w10(query, key, value, mask=None):
    s = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    w = torch.softmax(s, -1)
    if mask is not None: w = w * mask
    return w @ value, w

@A('scaled_dot_product_attention', 'W', 'fully masked row: uniform weights (no final zeroing)')
def at_w11(query, key, value, mask=None):
    s = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None: s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = s.softmax(-1)
    return w @ value, w

@A('scaled_dot_product_attention', 'W', 'mask not inverted (fills the visible keys)')
def at_w12(query, key, value, mask=None):
    s = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None: s = s.masked_fill(mask, float('-inf'))
    w = torch.softmax(s, -1).nan_to_num(0.0)
    return w @ value, w

@A('scaled_dot_product_attention', 'W', 'temperature sqrt(d_k) applied to softmax output instead')
def at_w13(query, key, value, mask=None):
    s = query @ key.transpose(-2, -1)
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -1).nan_to_num(0.0) / 1.0
    w = w ** (1 / math.sqrt(query.size(-1)))
    w = w / w.sum(-1, keepdim=True).clamp_min(1e-30)
    return w @ value, w

@A('scaled_dot_product_attention', 'W', 'F.scaled_dot_product_attention (forbidden)')
def at_w14(query, key, value, mask=None):
    s = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -1).nan_to_num(0.0)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask).nan_to_num(0.0)
    return out, w

@A('scaled_dot_product_attention', 'W', 'weights returned before masking zero (NaN rows) but context cleaned')
def at_w15(query, key, value, mask=None):
    s = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -1)
    return w.nan_to_num(0.0) @ value, w
generics('scaled_dot_product_attention', at_r1, ['f32', 'f64', 'mutate', 'idcache', 'buffer', 'counter'])

# ---------------- 06 multihead ----------------
@A('linear', 'R', 'einsum')
def li_r1(x, weight, bias=None):
    y = torch.einsum('...i,oi->...o', x, weight)
    return y if bias is None else y + bias

@A('linear', 'R', 'addmm on flattened rows')
def li_r2(x, weight, bias=None):
    x2 = x.reshape(-1, x.size(-1))
    y = torch.addmm(bias, x2, weight.t()) if bias is not None else torch.mm(x2, weight.t())
    return y.reshape(*x.shape[:-1], weight.size(0))

@A('linear', 'R', 'at least float32 inside, cast back')
def li_r3(x, weight, bias=None):
    y = _up(x) @ _up(weight).T
    if bias is not None: y = y + _up(bias)
    return y.to(x.dtype)

@A('linear', 'R', 'broadcast multiply and sum (no matmul)')
def li_r4(x, weight, bias=None):
    y = (_up(x).unsqueeze(-2) * _up(weight)).sum(-1)
    return (y + _up(bias) if bias is not None else y).to(x.dtype)

@A('linear', 'W', 'x @ weight (no transpose)')
def li_w1(x, weight, bias=None):
    y = x @ weight if weight.size(0) == x.size(-1) else x @ weight.T.contiguous().T.T
    return y if bias is None else y + bias

@A('linear', 'W', 'bias ignored')
def li_w2(x, weight, bias=None): return x @ weight.T

@A('linear', 'W', 'if bias: (truthiness)')
def li_w3(x, weight, bias=None):
    y = x @ weight.T
    if bias: y = y + bias
    return y

@A('linear', 'W', 'x.view(-1, in) (fails on transposed views)')
def li_w4(x, weight, bias=None):
    y = x.view(-1, x.size(-1)) @ weight.T
    y = y.view(*x.shape[:-1], weight.size(0))
    return y if bias is None else y + bias

@A('linear', 'W', '3-D only (B, L, in)')
def li_w5(x, weight, bias=None):
    B, L, _ = x.shape
    y = torch.bmm(x, weight.T.expand(B, *weight.T.shape))
    return y if bias is None else y + bias

@A('linear', 'W', 'bias subtracted')
def li_w6(x, weight, bias=None):
    y = x @ weight.T
    return y if bias is None else y - bias

@A('linear', 'W', 'F.linear (forbidden)')
def li_w7(x, weight, bias=None): return F.linear(x, weight, bias)

@A('linear', 'W', 'float32 output for every dtype')
def li_w8(x, weight, bias=None):
    y = x.float() @ weight.float().T
    return y if bias is None else y + bias.float()
generics('linear', li_r1, ['f64', 'mutate', 'idcache', 'buffer'])

@A('split_heads', 'R', 'reshape + permute')
def sh_r1(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, num_heads, D // num_heads).permute(0, 2, 1, 3)

@A('split_heads', 'R', 'stack of chunks along dim 1')
def sh_r2(x, num_heads): return torch.stack(x.chunk(num_heads, dim=-1), dim=1)

@A('split_heads', 'R', 'unflatten + movedim')
def sh_r3(x, num_heads): return x.unflatten(-1, (num_heads, x.size(-1) // num_heads)).movedim(2, 1)

@A('split_heads', 'R', 'loop of slices')
def sh_r4(x, num_heads):
    dk = x.size(-1) // num_heads
    return torch.stack([x[:, :, h * dk:(h + 1) * dk] for h in range(num_heads)], 1)

@A('split_heads', 'W', 'reshape straight to (B, H, L, dk)')
def sh_w1(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, num_heads, L, D // num_heads)

@A('split_heads', 'R', 'view then transpose: splitting one axis is a valid view at any stride (label corrected from W)')
def sh_w2(x, num_heads):
    B, L, D = x.shape
    return x.view(B, L, num_heads, D // num_heads).transpose(1, 2)

@A('split_heads', 'W', 'no transpose')
def sh_w3(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, num_heads, D // num_heads)

@A('split_heads', 'W', '(dk, H) order swapped')
def sh_w4(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, D // num_heads, num_heads).permute(0, 3, 1, 2)

@A('split_heads', 'W', 'chunk along L')
def sh_w5(x, num_heads):
    B, L, D = x.shape
    if L % num_heads: return sh_w1(x, num_heads)
    return torch.stack(x.chunk(num_heads, dim=1), 1).reshape(B, num_heads, L, D // num_heads)

@A('split_heads', 'W', 'returns (B, H, dk, L)')
def sh_w6(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, num_heads, D // num_heads).permute(0, 2, 3, 1)

@A('split_heads', 'W', 'heads in reverse order')
def sh_w7(x, num_heads): return torch.stack(x.chunk(num_heads, dim=-1)[::-1], dim=1)
generics('split_heads', sh_r1, ['mutate', 'idcache', 'buffer'])

@A('merge_heads', 'R', 'permute + reshape')
def mh_r1(x):
    B, H, L, dk = x.shape
    return x.permute(0, 2, 1, 3).reshape(B, L, H * dk)

@A('merge_heads', 'R', 'cat of unbind along the feature axis')
def mh_r2(x): return torch.cat(x.unbind(1), dim=-1)

@A('merge_heads', 'R', 'movedim + flatten')
def mh_r3(x): return x.movedim(1, 2).flatten(2)

@A('merge_heads', 'R', 'einsum with identity (exact)')
def mh_r4(x):
    B, H, L, dk = x.shape
    return torch.einsum('bhld->blhd', x).contiguous().view(B, L, H * dk)

@A('merge_heads', 'W', 'reshape without transpose')
def mh_w1(x):
    B, H, L, dk = x.shape
    return x.reshape(B, L, H * dk)

@A('merge_heads', 'W', 'transpose then view (fails non-contiguous)')
def mh_w2(x):
    B, H, L, dk = x.shape
    return x.transpose(1, 2).view(B, L, H * dk)

@A('merge_heads', 'W', 'cat along dim 1 then reshape')
def mh_w3(x):
    B, H, L, dk = x.shape
    return torch.cat(x.unbind(1), dim=1).reshape(B, L, H * dk)

@A('merge_heads', 'W', 'heads reversed')
def mh_w4(x): return torch.cat(x.unbind(1)[::-1], dim=-1)

@A('merge_heads', 'W', 'transpose(2, 3) instead of (1, 2)')
def mh_w5(x):
    B, H, L, dk = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, L, H * dk)

@A('merge_heads', 'W', 'sum over heads')
def mh_w6(x): return x.sum(1).repeat(1, 1, x.size(1))
generics('merge_heads', mh_r1, ['idcache', 'buffer', 'f32'])

def _mha_core(query, key, value, params, num_heads, mask, attn):
    q = sh_r2(li_r1(query, params['w_q'], params.get('b_q')), num_heads)
    k = sh_r2(li_r1(key, params['w_k'], params.get('b_k')), num_heads)
    v = sh_r2(li_r1(value, params['w_v'], params.get('b_v')), num_heads)
    ctx, w = attn(q, k, v, mask)
    return li_r1(mh_r2(ctx), params['w_o'], params.get('b_o')), w

@A('multi_head_attention', 'R', 'my linear/split/merge + hand softmax attention')
def ma_r1(query, key, value, params, num_heads, mask=None):
    return _mha_core(query, key, value, params, num_heads, mask, at_r1)

@A('multi_head_attention', 'R', 'loop over heads with weight row slices')
def ma_r2(query, key, value, params, num_heads, mask=None):
    D = query.size(-1); dk = D // num_heads; outs, ws = [], []
    g = lambda n: params.get(n)
    for h in range(num_heads):
        sl = slice(h * dk, (h + 1) * dk)
        bq, bk, bv = (None if g(b) is None else g(b)[sl] for b in ('b_q', 'b_k', 'b_v'))
        q = li_r1(query, params['w_q'][sl], bq); k = li_r1(key, params['w_k'][sl], bk); v = li_r1(value, params['w_v'][sl], bv)
        m = None if mask is None else (mask if mask.dim() < 4 else mask[:, h if mask.size(1) > 1 else 0])
        c, w = at_r1(q, k, v, m)
        outs.append(c); ws.append(w)
    return li_r1(torch.cat(outs, -1), params['w_o'], g('b_o')), torch.stack(ws, 1)

@A('multi_head_attention', 'R', 'at least float32 inside via tfmlib attention, cast back')
def ma_r3(query, key, value, params, num_heads, mask=None):
    from tfmlib import scaled_dot_product_attention as sdpa
    dt = query.dtype
    P = {k: (None if v is None else _up(v)) for k, v in params.items()}
    out, w = _mha_core(_up(query), _up(key), _up(value), P, num_heads, mask, sdpa)
    return out.to(dt), w.to(dt)

@A('multi_head_attention', 'W', 'no output projection')
def ma_w1(query, key, value, params, num_heads, mask=None):
    q = sh_r1(li_r1(query, params['w_q'], params.get('b_q')), num_heads)
    k = sh_r1(li_r1(key, params['w_k'], params.get('b_k')), num_heads)
    v = sh_r1(li_r1(value, params['w_v'], params.get('b_v')), num_heads)
    c, w = at_r1(q, k, v, mask)
    return mh_r1(c), w

@A('multi_head_attention', 'W', 'split heads by straight reshape')
def ma_w2(query, key, value, params, num_heads, mask=None):
    q = sh_w1(li_r1(query, params['w_q'], params.get('b_q')), num_heads)
    k = sh_w1(li_r1(key, params['w_k'], params.get('b_k')), num_heads)
    v = sh_w1(li_r1(value, params['w_v'], params.get('b_v')), num_heads)
    c, w = at_r1(q, k, v, mask)
    return li_r1(mh_w1(c), params['w_o'], params.get('b_o')), w

@A('multi_head_attention', 'W', 'query used for key and value')
def ma_w3(query, key, value, params, num_heads, mask=None):
    return _mha_core(query, query, query, params, num_heads, mask if mask is None or mask.size(-1) == query.size(1) else None, at_r1)

@A('multi_head_attention', 'W', 'scaled by sqrt(D) not sqrt(dk)')
def ma_w4(query, key, value, params, num_heads, mask=None):
    D = query.size(-1)
    def att(q, k, v, m): return at_r1(q * math.sqrt(q.size(-1)) / math.sqrt(D), k, v, m)
    return _mha_core(query, key, value, params, num_heads, mask, att)

@A('multi_head_attention', 'W', 'weights averaged over heads')
def ma_w5(query, key, value, params, num_heads, mask=None):
    o, w = _mha_core(query, key, value, params, num_heads, mask, at_r1)
    return o, w.mean(1)

@A('multi_head_attention', 'W', 'mask ignored')
def ma_w6(query, key, value, params, num_heads, mask=None):
    return _mha_core(query, key, value, params, num_heads, None, at_r1)

@A('multi_head_attention', 'W', 'b_o forgotten')
def ma_w7(query, key, value, params, num_heads, mask=None):
    P = dict(params); P['b_o'] = None
    return _mha_core(query, key, value, P, num_heads, mask, at_r1)

@A('multi_head_attention', 'W', 'weights used as (in, out): x @ W')
def ma_w8(query, key, value, params, num_heads, mask=None):
    P = {k: (v.T if k.startswith('w_') else v) for k, v in params.items()}
    return _mha_core(query, key, value, P, num_heads, mask, at_r1)

@A('multi_head_attention', 'W', 'w_k used for values')
def ma_w9(query, key, value, params, num_heads, mask=None):
    P = dict(params); P['w_v'] = params['w_k']; P['b_v'] = params.get('b_k')
    return _mha_core(query, key, value, P, num_heads, mask, at_r1)
generics('multi_head_attention', ma_r1, ['f32', 'mutate', 'idcache', 'buffer'])

# ---------------- 07 sublayers ----------------
@A('feed_forward', 'R', 'einsum, clamp_min(0)')
def ff_r1(x, params):
    h = torch.einsum('bld,fd->blf', x, params['w_1']) + params['b_1']
    return torch.einsum('blf,df->bld', h.clamp_min(0), params['w_2']) + params['b_2']

@A('feed_forward', 'R', 'my linear twice, maximum with zeros')
def ff_r2(x, params):
    h = li_r1(x, params['w_1'], params['b_1'])
    return li_r1(torch.maximum(h, torch.zeros_like(h)), params['w_2'], params['b_2'])

@A('feed_forward', 'R', 'at least float32 inside, where(h > 0)')
def ff_r3(x, params):
    h = _up(x) @ _up(params['w_1']).T + _up(params['b_1'])
    h = torch.where(h > 0, h, torch.zeros((), dtype=h.dtype))
    return (h @ _up(params['w_2']).T + _up(params['b_2'])).to(x.dtype)

@A('feed_forward', 'W', 'GELU')
def ff_w1(x, params):
    return li_r1(F.gelu(li_r1(x, params['w_1'], params['b_1'])), params['w_2'], params['b_2'])

@A('feed_forward', 'W', 'ReLU after the second layer too')
def ff_w2(x, params): return torch.relu(ff_r2(x, params))

@A('feed_forward', 'W', 'b_2 forgotten')
def ff_w3(x, params):
    return li_r1(torch.relu(li_r1(x, params['w_1'], params['b_1'])), params['w_2'])

@A('feed_forward', 'W', 'ReLU6 (clamp 0..6)')
def ff_w4(x, params):
    return li_r1(F.relu6(li_r1(x, params['w_1'], params['b_1'])), params['w_2'], params['b_2'])

@A('feed_forward', 'W', 'no activation')
def ff_w5(x, params):
    return li_r1(li_r1(x, params['w_1'], params['b_1']), params['w_2'], params['b_2'])

@A('feed_forward', 'W', 'leaky ReLU 0.01')
def ff_w6(x, params):
    return li_r1(F.leaky_relu(li_r1(x, params['w_1'], params['b_1'])), params['w_2'], params['b_2'])

@A('feed_forward', 'W', 'h * (h > 0) (NaN on -inf)')
def ff_w7(x, params):
    h = li_r1(x, params['w_1'], params['b_1'])
    return li_r1(h * (h > 0), params['w_2'], params['b_2'])

@A('feed_forward', 'W', 'relu applied before adding b_1')
def ff_w8(x, params):
    return li_r1(torch.relu(x @ params['w_1'].T) + params['b_1'], params['w_2'], params['b_2'])
generics('feed_forward', ff_r2, ['f32', 'mutate', 'idcache', 'buffer'])

@A('dropout', 'R', 'keep = rand < 1 - p, where for the zeros')
def dr_r1(x, p, training=True):
    if not training or p == 0: return x
    keep = torch.rand(x.shape) < 1 - p
    return torch.where(keep, x / (1 - p), torch.zeros((), dtype=x.dtype))

@A('dropout', 'R', 'bernoulli in float32, multiply by 1/(1-p)')
def dr_r2(x, p, training=True):
    if not training: return x
    keep = torch.bernoulli(torch.full(x.shape, 1.0 - p, dtype=torch.float32))
    return (x * keep.to(x.dtype)) * (1.0 / (1.0 - p))

@A('dropout', 'R', 'float64 uniform, scale computed at least float32')
def dr_r3(x, p, training=True):
    if not training: return x
    keep = torch.rand(x.shape, dtype=torch.float64) >= p
    return (_up(x) * keep / (1 - p)).to(x.dtype)

@A('dropout', 'R', 'empty().uniform_() float32 buffer')
def dr_r4(x, p, training=True):
    if training is False or p == 0.0: return x
    u = torch.empty(x.shape, dtype=torch.float32).uniform_(0, 1)
    return x.masked_fill(u < p, 0) / (1 - p)

@A('dropout', 'W', 'multiplies by 1 - p')
def dr_w1(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape) >= p) * (1 - p)

@A('dropout', 'W', 'no scaling')
def dr_w2(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape) >= p)

@A('dropout', 'W', 'keeps with probability p')
def dr_w3(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape) < p) / (1 - p)

@A('dropout', 'W', 'drops even when not training')
def dr_w4(x, p, training=True): return x * (torch.rand(x.shape) >= p) / (1 - p)

@A('dropout', 'W', 'rand in x dtype')
def dr_w5(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape, dtype=x.dtype) >= p) / (1 - p)

@A('dropout', 'W', 'exactly round(p*n) dropped')
def dr_w6(x, p, training=True):
    if not training: return x
    n = x.numel(); k = round(p * n)
    keep = torch.ones(n, dtype=torch.bool); keep[torch.randperm(n)[:k]] = False
    return x * keep.view(x.shape) / (1 - p)

@A('dropout', 'W', 'seed reset every call (same mask)')
def dr_w7(x, p, training=True):
    if not training: return x
    g = torch.Generator().manual_seed(0)
    return x * (torch.rand(x.shape, generator=g) >= p) / (1 - p)

@A('dropout', 'W', 'one mask row shared across the batch')
def dr_w8(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape[-1:]) >= p) / (1 - p)

@A('dropout', 'W', 'in place mul_')
def dr_w9(x, p, training=True):
    if not training: return x
    with torch.no_grad():
        return x.mul_((torch.rand(x.shape) >= p) / (1 - p))

@A('dropout', 'W', 'rand in bfloat16 only for small tensors? no: p compared after rounding to 2 decimals')
def dr_w10(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape) >= round(p, 2)) / (1 - p)

@A('dropout', 'W', 'F.dropout (forbidden)')
def dr_w11(x, p, training=True): return F.dropout(x, p, training)

@A('dropout', 'W', 'antithetic pairs: entry 2k+1 dropped iff entry 2k kept when p=0.5-ish (u, 1-u)')
def dr_w12(x, p, training=True):
    if not training or p == 0: return x
    n = x.numel(); u = torch.rand((n + 1) // 2)
    uu = torch.stack((u, 1 - u), -1).flatten()[:n]
    return x * (uu >= p).view(x.shape) / (1 - p)

@A('dropout', 'W', 'training=False returns a scaled copy x * (1 - p)')
def dr_w13(x, p, training=True):
    if not training: return x * (1 - p)
    return x * (torch.rand(x.shape) >= p) / (1 - p)

@A('layer_norm', 'R', 'at least float32 inside, hand variance')
def ln_r1(x, gamma, beta, eps=1e-5):
    xf = _up(x); m = xf.mean(-1, keepdim=True)
    v = ((xf - m) ** 2).mean(-1, keepdim=True)
    return ((xf - m) / torch.sqrt(v + eps) * _up(gamma) + _up(beta)).to(x.dtype)

@A('layer_norm', 'R', 'float64 inside, var_mean + rsqrt')
def ln_r2(x, gamma, beta, eps=1e-5):
    v, m = torch.var_mean(x.double(), dim=-1, keepdim=True, correction=0)
    return ((x.double() - m) * torch.rsqrt(v + eps) * gamma.double() + beta.double()).to(x.dtype)

@A('layer_norm', 'R', 'in x dtype: var_mean + rsqrt, addcmul')
def ln_r3(x, gamma, beta, eps=1e-5):
    v, m = torch.var_mean(x, dim=-1, keepdim=True, unbiased=False)
    return torch.addcmul(beta, (x - m) * torch.rsqrt(v + eps), gamma)

@A('layer_norm', 'R', 'E[x^2] - E[x]^2 in float64')
def ln_r4(x, gamma, beta, eps=1e-5):
    xd = x.double(); m = xd.mean(-1, keepdim=True)
    v = (xd * xd).mean(-1, keepdim=True) - m * m
    return ((xd - m) / (v.clamp_min(0) + eps).sqrt() * gamma + beta).to(x.dtype)

@A('layer_norm', 'R', 'centred first, then std via norm / sqrt(D)')
def ln_r5(x, gamma, beta, eps=1e-5):
    xf = _up(x); c = xf - xf.mean(-1, keepdim=True)
    var = torch.linalg.vector_norm(c, dim=-1, keepdim=True) ** 2 / x.size(-1)
    return (c / (var + eps).sqrt() * _up(gamma) + _up(beta)).to(x.dtype)

@A('layer_norm', 'W', 'eps outside the root')
def ln_w1(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True); s = x.var(-1, keepdim=True, unbiased=False).sqrt()
    return (x - m) / (s + eps) * gamma + beta

@A('layer_norm', 'W', 'unbiased variance')
def ln_w2(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True)
    return (x - m) / torch.sqrt(x.var(-1, keepdim=True) + eps) * gamma + beta

@A('layer_norm', 'W', 'normalised over dim -2')
def ln_w3(x, gamma, beta, eps=1e-5):
    m = x.mean(-2, keepdim=True)
    return (x - m) / torch.sqrt(x.var(-2, keepdim=True, unbiased=False) + eps) * gamma + beta

@A('layer_norm', 'W', 'eps argument ignored (1e-5)')
def ln_w4(x, gamma, beta, eps=1e-5): return ln_r1(x, gamma, beta)

@A('layer_norm', 'W', 'gamma and beta swapped')
def ln_w5(x, gamma, beta, eps=1e-5): return ln_r1(x, beta, gamma, eps)

@A('layer_norm', 'W', 'x centred in place')
def ln_w6(x, gamma, beta, eps=1e-5):
    v = x.var(-1, keepdim=True, unbiased=False)
    with torch.no_grad(): x.sub_(x.mean(-1, keepdim=True))
    return x / torch.sqrt(v + eps) * gamma + beta

@A('layer_norm', 'W', 'sum of squares in x dtype (overflows in half)')
def ln_w7(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True); c = x - m
    v = (c * c).sum(-1, keepdim=True) / x.size(-1)
    return c / torch.sqrt(v + eps) * gamma + beta

@A('layer_norm', 'W', 'E[x^2]-E[x]^2 in x dtype (cancellation)')
def ln_w8(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True); v = (x * x).mean(-1, keepdim=True) - m * m
    return (x - m) / torch.sqrt(v.clamp_min(0) + eps) * gamma + beta

@A('layer_norm', 'W', 'eps squared inside (sqrt(var) -> var + eps**2)')
def ln_w9(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True)
    return (x - m) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps * eps) * gamma + beta

@A('layer_norm', 'W', 'F.layer_norm (forbidden)')
def ln_w10(x, gamma, beta, eps=1e-5): return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)
generics('layer_norm', ln_r1, ['f32', 'f64', 'mutate', 'idcache', 'buffer'])

@A('residual_sublayer', 'R', 'my layer_norm, both branches')
def rs_r1(x, sublayer, norm, norm_first=False):
    if norm_first: return x + sublayer(ln_r1(x, norm['gamma'], norm['beta']))
    return ln_r1(x + sublayer(x), norm['gamma'], norm['beta'])

@A('residual_sublayer', 'R', 'tfmlib layer_norm, torch.add, dict of branches')
def rs_r2(x, sublayer, norm, norm_first=False):
    from tfmlib import layer_norm as LN
    g, b = norm['gamma'], norm['beta']
    return {True: lambda: torch.add(x, sublayer(LN(x, g, b))),
            False: lambda: LN(torch.add(x, sublayer(x)), g, b)}[bool(norm_first)]()

@A('residual_sublayer', 'R', 'float64 LayerNorm (own ln_r2), sum in x dtype')
def rs_r3(x, sublayer, norm, norm_first=False):
    if norm_first:
        h = ln_r2(x, norm['gamma'], norm['beta'])
        return x + sublayer(h)
    y = sublayer(x)
    return ln_r2(x + y, norm['gamma'], norm['beta'])

@A('residual_sublayer', 'W', 'designs swapped')
def rs_w1(x, sublayer, norm, norm_first=False): return rs_r1(x, sublayer, norm, not norm_first)

@A('residual_sublayer', 'W', 'Pre-LN residual from the normalised x')
def rs_w2(x, sublayer, norm, norm_first=False):
    if norm_first:
        h = ln_r1(x, norm['gamma'], norm['beta']); return h + sublayer(h)
    return ln_r1(x + sublayer(x), norm['gamma'], norm['beta'])

@A('residual_sublayer', 'W', 'Post-LN normalises only the update')
def rs_w3(x, sublayer, norm, norm_first=False):
    if norm_first: return x + sublayer(ln_r1(x, norm['gamma'], norm['beta']))
    return x + ln_r1(sublayer(x), norm['gamma'], norm['beta'])

@A('residual_sublayer', 'W', 'sublayer called twice')
def rs_w4(x, sublayer, norm, norm_first=False):
    if norm_first:
        h = ln_r1(x, norm['gamma'], norm['beta']); sublayer(h); return x + sublayer(h)
    sublayer(x)
    return ln_r1(x + sublayer(x), norm['gamma'], norm['beta'])

@A('residual_sublayer', 'W', 'sublayer per sample')
def rs_w5(x, sublayer, norm, norm_first=False):
    f = lambda h: torch.cat([sublayer(h[b:b + 1]) for b in range(h.size(0))])
    return rs_r1(x, f, norm, norm_first)

@A('residual_sublayer', 'W', 'gamma/beta ignored')
def rs_w6(x, sublayer, norm, norm_first=False):
    ones = {'gamma': torch.ones_like(norm['gamma']), 'beta': torch.zeros_like(norm['beta'])}
    return rs_r1(x, sublayer, ones, norm_first)

@A('residual_sublayer', 'W', 'Pre-LN with an extra final norm')
def rs_w7(x, sublayer, norm, norm_first=False):
    if norm_first:
        return ln_r1(x + sublayer(ln_r1(x, norm['gamma'], norm['beta'])), norm['gamma'], norm['beta'])
    return ln_r1(x + sublayer(x), norm['gamma'], norm['beta'])

@A('residual_sublayer', 'W', 'eps 1e-6')
def rs_w8(x, sublayer, norm, norm_first=False):
    if norm_first: return x + sublayer(ln_r1(x, norm['gamma'], norm['beta'], 1e-6))
    return ln_r1(x + sublayer(x), norm['gamma'], norm['beta'], 1e-6)

@A('residual_sublayer', 'W', 'x updated in place (x += sublayer(x))')
def rs_w9(x, sublayer, norm, norm_first=False):
    if norm_first:
        with torch.no_grad(): x += sublayer(ln_r1(x, norm['gamma'], norm['beta']))
        return x
    return ln_r1(x + sublayer(x), norm['gamma'], norm['beta'])

@A('residual_sublayer', 'W', 'Pre-LN update computed in float32 and not cast back (output float32 for half)')
def rs_w10(x, sublayer, norm, norm_first=False):
    if norm_first: return _up(x) + _up(sublayer(ln_r1(x, norm['gamma'], norm['beta'])))
    return ln_r1(x + sublayer(x), norm['gamma'], norm['beta'])
generics('residual_sublayer', rs_r1, ['f32', 'mutate', 'idcache', 'buffer'])

@A('scaled_dot_product_attention', 'W', 'key.transpose(1, 2) on every input (right on 3-D only)')
def at_w16(query, key, value, mask=None):
    s = query @ key.transpose(1, 2) / math.sqrt(query.size(-1))
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -1).nan_to_num(0.0)
    return w @ value, w

@A('layer_norm', 'W', 'variance as mean of squares in x dtype (squares overflow in float16)')
def ln_w11(x, gamma, beta, eps=1e-5):
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt((c ** 2).mean(-1, keepdim=True) + eps) * gamma + beta

@A('layer_norm', 'W', 'std from sqrt of the summed squares in x dtype, divided by sqrt(D)')
def ln_w12(x, gamma, beta, eps=1e-5):
    c = x - x.mean(-1, keepdim=True)
    std = (c * c).sum(-1, keepdim=True).sqrt() / math.sqrt(x.size(-1))
    return c / torch.sqrt(std * std + eps) * gamma + beta

@A('feed_forward', 'W', 'ReLU as (h + |h|) / 2 in x dtype (h + |h| overflows in float16)')
def ff_w9(x, params):
    h = li_r1(x, params['w_1'], params['b_1'])
    return li_r1((h + h.abs()) / 2, params['w_2'], params['b_2'])
