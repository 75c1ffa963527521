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
