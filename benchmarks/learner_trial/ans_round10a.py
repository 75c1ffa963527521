"""Learner trial round 10a: answers for 01-07 (R = right, W = wrong), written blind to the checks."""
import functools, itertools, math
import torch
import torch.nn.functional as F
from harness import *

# ---------------- 01 broadcast_shape ----------------
@A('broadcast_shape', 'R', 'zip_longest from the right')
def bs_r1(a, b):
    out = []
    for i, (x, y) in enumerate(itertools.zip_longest(reversed(a), reversed(b), fillvalue=1)):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"axis {-i - 1}: sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))

@A('broadcast_shape', 'R', 'recursive on the last axis')
def bs_r2(a, b):
    a, b = tuple(a), tuple(b)
    if not a: return b
    if not b: return a
    x, y = a[-1], b[-1]
    if x == 1: s = y
    elif y == 1 or x == y: s = x
    else: raise ValueError(f"sizes {x} and {y} clash")
    return bs_r2(a[:-1], b[:-1]) + (s,)

@A('broadcast_shape', 'R', 'pad left with 1s, then list comprehension + error scan')
def bs_r3(a, b):
    n = max(len(a), len(b))
    pa = [1] * (n - len(a)) + list(a); pb = [1] * (n - len(b)) + list(b)
    bad = [(x, y) for x, y in zip(pa, pb) if 1 not in (x, y) and x != y]
    if bad:
        raise ValueError("clash: " + ", ".join(f"sizes {x} and {y}" for x, y in bad))
    return tuple(x * y // (x if x == y else 1) if 1 not in (x, y) else (y if x == 1 else x) for x, y in zip(pa, pb))

@A('broadcast_shape', 'W', 'max of sizes (0 vs 1 gives 1)')
def bs_w1(a, b):
    n = max(len(a), len(b)); pa = (1,) * (n - len(a)) + tuple(a); pb = (1,) * (n - len(b)) + tuple(b)
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y): raise ValueError(f"sizes {x} and {y} clash")
    return tuple(max(x, y) for x, y in zip(pa, pb))

@A('broadcast_shape', 'W', 'a 0 treated like a 1 (0 vs 5 -> 5, no error)')
def bs_w2(a, b):
    n = max(len(a), len(b)); pa = (1,) * (n - len(a)) + tuple(a); pb = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x != y and x not in (0, 1) and y not in (0, 1): raise ValueError(f"sizes {x} and {y} clash")
        out.append(max(x, y) if 1 in (x, y) or 0 in (x, y) else x)
    return tuple(out)

@A('broadcast_shape', 'W', 'aligned from the left')
def bs_w3(a, b):
    n = max(len(a), len(b)); pa = tuple(a) + (1,) * (n - len(a)); pb = tuple(b) + (1,) * (n - len(b))
    out = []
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y): raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(out)

@A('broadcast_shape', 'W', 'error message without the sizes')
def bs_w4(a, b):
    try: return bs_r1(a, b)
    except ValueError: raise ValueError("shapes do not broadcast") from None

@A('broadcast_shape', 'W', 'returns a list')
def bs_w5(a, b): return list(bs_r1(a, b))

@A('broadcast_shape', 'W', 'pads only one missing axis')
def bs_w6(a, b):
    a, b = tuple(a), tuple(b)
    if len(a) < len(b): a = (1,) + a
    elif len(b) < len(a): b = (1,) + b
    out = []
    for x, y in zip(reversed(a), reversed(b)):
        if x != y and 1 not in (x, y): raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))

@A('broadcast_shape', 'W', 'raises AssertionError')
def bs_w7(a, b):
    try: return bs_r1(a, b)
    except ValueError as e: raise AssertionError(str(e)) from None

@A('broadcast_shape', 'W', 'names only one size')
def bs_w8(a, b):
    n = max(len(a), len(b)); pa = (1,) * (n - len(a)) + tuple(a); pb = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y): raise ValueError(f"size {x} does not fit")
        out.append(y if x == 1 else x)
    return tuple(out)

# ---------------- 02 tokenization ----------------
SP = ("<pad>", "<bos>", "<eos>", "<unk>")

@A('build_vocab', 'R', 'dict.fromkeys over specials then words')
def bv_r1(sentences, specials=SP):
    toks = list(dict.fromkeys([*specials, *(w for s in sentences for w in s.split())]))
    return {t: i for i, t in enumerate(toks)}

@A('build_vocab', 'R', 'explicit loop with membership test')
def bv_r2(sentences, specials=SP):
    v = {}
    for t in specials:
        if t not in v: v[t] = len(v)
    for s in sentences:
        for w in s.split(None):
            if w not in v: v[w] = len(v)
    return v

@A('build_vocab', 'R', 're.findall non-space runs, itertools.chain')
def bv_r3(sentences, specials=SP):
    import re
    v = {}
    for w in itertools.chain(specials, *(re.findall(r'\S+', s) for s in sentences)):
        v.setdefault(w, len(v))
    return v

@A('build_vocab', 'W', 'split(" ")')
def bv_w1(sentences, specials=SP):
    v = {t: i for i, t in enumerate(specials)}
    for s in sentences:
        for w in s.split(" "): v.setdefault(w, len(v))
    return v

@A('build_vocab', 'W', 'lower-cases')
def bv_w2(sentences, specials=SP): return bv_r2([s.lower() for s in sentences], specials)

@A('build_vocab', 'W', 'words sorted alphabetically')
def bv_w3(sentences, specials=SP):
    v = {t: i for i, t in enumerate(specials)}
    for w in sorted({w for s in sentences for w in s.split()}): v.setdefault(w, len(v))
    return v

@A('build_vocab', 'W', 'word ids = len(specials) + index, a typed special overwritten')
def bv_w4(sentences, specials=SP):
    v = {t: i for i, t in enumerate(specials)}
    words = list(dict.fromkeys(w for s in sentences for w in s.split()))
    v.update({w: len(specials) + i for i, w in enumerate(words)})
    return v

@A('build_vocab', 'W', 'hard-coded specials')
def bv_w5(sentences, specials=SP): return bv_r2(sentences, SP)

@A('build_vocab', 'W', 'strips punctuation off words')
def bv_w6(sentences, specials=SP):
    v = {t: i for i, t in enumerate(specials)}
    for s in sentences:
        for w in s.split():
            w2 = w.strip('.,!?;:') or w
            v.setdefault(w2, len(v))
    return v

_BV_STATE = {}
@A('build_vocab', 'W', 'module-level vocab kept between calls')
def bv_w7(sentences, specials=SP):
    for t in specials: _BV_STATE.setdefault(t, len(_BV_STATE))
    for s in sentences:
        for w in s.split(): _BV_STATE.setdefault(w, len(_BV_STATE))
    return dict(_BV_STATE)

@A('build_vocab', 'W', 'frequency order (most_common)')
def bv_w8(sentences, specials=SP):
    from collections import Counter
    c = Counter(w for s in sentences for w in s.split())
    v = {t: i for i, t in enumerate(specials)}
    for w, _ in c.most_common(): v.setdefault(w, len(v))
    return v

@A('encode', 'R', 'try/except KeyError')
def en_r1(sentence, vocab, add_bos=False, add_eos=False):
    out = [vocab["<bos>"]] if add_bos else []
    for w in sentence.split():
        try: out.append(vocab[w])
        except KeyError: out.append(vocab["<unk>"])
    if add_eos: out += [vocab["<eos>"]]
    return out

@A('encode', 'R', 'tuple concatenation, map')
def en_r2(sentence, vocab, add_bos=False, add_eos=False):
    unk = vocab["<unk>"]
    ids = tuple(map(lambda w: vocab[w] if w in vocab else unk, sentence.split()))
    return list((vocab["<bos>"],) * bool(add_bos) + ids + (vocab["<eos>"],) * bool(add_eos))

@A('encode', 'R', 're.split on whitespace, filtered')
def en_r3(sentence, vocab, add_bos=False, add_eos=False):
    import re
    toks = [t for t in re.split(r'\s+', sentence) if t]
    ids = [vocab.get(t, vocab["<unk>"]) for t in toks]
    if add_bos: ids = [vocab["<bos>"]] + ids
    if add_eos: ids = ids + [vocab["<eos>"]]
    return ids

@A('encode', 'W', 'split(" ")')
def en_w1(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t, vocab["<unk>"]) for t in sentence.split(" ")]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])

@A('encode', 'W', 'vocab.get(t) or unk (id 0 becomes unk)')
def en_w2(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t) or vocab["<unk>"] for t in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])

@A('encode', 'W', 'hard-coded ids bos=1 eos=2 unk=3')
def en_w3(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t, 3) for t in sentence.split()]
    return ([1] if add_bos else []) + ids + ([2] if add_eos else [])

@A('encode', 'W', 'lower-cases')
def en_w4(sentence, vocab, add_bos=False, add_eos=False): return en_r1(sentence.lower(), vocab, add_bos, add_eos)

@A('encode', 'W', 'typed special tokens become <unk>')
def en_w5(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab["<unk>"] if (t in SP or t not in vocab) else vocab[t] for t in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])

@A('encode', 'W', 'returns a tensor')
def en_w6(sentence, vocab, add_bos=False, add_eos=False): return torch.tensor(en_r1(sentence, vocab, add_bos, add_eos), dtype=torch.long)

@A('encode', 'W', 'strips punctuation')
def en_w7(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(t.strip('.,!?') or t, vocab["<unk>"]) for t in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])

@A('encode', 'W', 'add_eos also adds bos')
def en_w8(sentence, vocab, add_bos=False, add_eos=False): return en_r1(sentence, vocab, add_bos or add_eos, add_eos)

def _inv(vocab): return {i: t for t, i in vocab.items()}

@A('decode', 'R', 'takewhile then filter')
def de_r1(ids, vocab, skip_specials=True):
    inv = _inv(vocab); toks = [inv[int(i)] for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids)]
    if skip_specials:
        toks = [t for t in itertools.takewhile(lambda t: t != "<eos>", toks) if t not in SP]
    return " ".join(toks)

@A('decode', 'R', 'loop with index search for eos')
def de_r2(ids, vocab, skip_specials=True):
    inv = _inv(vocab)
    toks = [inv[int(i)] for i in list(ids)]
    if skip_specials and "<eos>" in toks: toks = toks[:toks.index("<eos>")]
    out = ""
    for t in toks:
        if skip_specials and t in set(SP): continue
        out = t if not out else out + " " + t
    return out

@A('decode', 'R', 'special ids looked up with vocab.get')
def de_r3(ids, vocab, skip_specials=True):
    inv = _inv(vocab); special_ids = {vocab[s] for s in SP if s in vocab}; eos = vocab.get("<eos>")
    words = []
    for i in ids:
        i = int(i)
        if skip_specials and i == eos: break
        if skip_specials and i in special_ids: continue
        words.append(inv[i])
    return " ".join(words)

@A('decode', 'W', 'does not stop at eos, only skips')
def de_w1(ids, vocab, skip_specials=True):
    inv = _inv(vocab); return " ".join(t for t in (inv[int(i)] for i in ids) if not (skip_specials and t in SP))

@A('decode', 'W', 'stops at eos even when keeping specials')
def de_w2(ids, vocab, skip_specials=True):
    inv = _inv(vocab); toks = []
    for i in ids:
        t = inv[int(i)]
        if t == "<eos>": break
        if skip_specials and t in SP: continue
        toks.append(t)
    return " ".join(toks)

@A('decode', 'W', 'dict order as id (list(vocab)[i])')
def de_w3(ids, vocab, skip_specials=True):
    keys = list(vocab); toks = []
    for i in ids:
        t = keys[int(i)]
        if skip_specials and t == "<eos>": break
        if skip_specials and t in SP: continue
        toks.append(t)
    return " ".join(toks)

@A('decode', 'W', 'special ids hard-coded 0..3')
def de_w4(ids, vocab, skip_specials=True):
    inv = _inv(vocab); toks = []
    for i in ids:
        i = int(i)
        if skip_specials and i == 2: break
        if skip_specials and i in (0, 1, 3): continue
        toks.append(inv[i])
    return " ".join(toks)

@A('decode', 'W', 'skips anything that looks like <...>')
def de_w5(ids, vocab, skip_specials=True):
    inv = _inv(vocab); toks = []
    for i in ids:
        t = inv[int(i)]
        if skip_specials and t == "<eos>": break
        if skip_specials and t.startswith("<"): continue
        toks.append(t)
    return " ".join(toks)

@A('decode', 'W', 'stops at the last eos')
def de_w6(ids, vocab, skip_specials=True):
    inv = _inv(vocab); toks = [inv[int(i)] for i in ids]
    if skip_specials and "<eos>" in toks: toks = toks[:len(toks) - 1 - toks[::-1].index("<eos>")]
    return " ".join(t for t in toks if not (skip_specials and t in SP))

@A('decode', 'W', 'skips only pad, bos, eos (keeps <unk>)')
def de_w7(ids, vocab, skip_specials=True):
    inv = _inv(vocab); toks = []
    for i in ids:
        t = inv[int(i)]
        if skip_specials and t == "<eos>": break
        if skip_specials and t in ("<pad>", "<bos>"): continue
        toks.append(t)
    return " ".join(toks)

@A('pad_batch', 'R', 'python lists then torch.tensor')
def pb_r1(id_lists, pad_id, max_len=None):
    if len(id_lists) == 0: raise ValueError("id_lists: empty batch")
    L = max_len if max_len is not None else max(len(r) for r in id_lists)
    rows = [[int(i) for i in list(r)[:L]] + [int(pad_id)] * (L - min(len(r), L)) for r in id_lists]
    return torch.tensor(rows, dtype=torch.long).reshape(len(id_lists), L)

@A('pad_batch', 'R', 'F.pad each row, stack')
def pb_r2(id_lists, pad_id, max_len=None):
    if not len(id_lists): raise ValueError("id_lists is empty")
    L = max_len if max_len is not None else max(map(len, id_lists))
    rows = [F.pad(torch.tensor([int(i) for i in r], dtype=torch.long)[:L], (0, L - min(len(r), L)), value=int(pad_id)) for r in id_lists]
    return torch.stack(rows)

@A('pad_batch', 'R', 'full then index assignment per element')
def pb_r3(id_lists, pad_id, max_len=None):
    if len(id_lists) < 1: raise ValueError("id_lists: no rows")
    L = max(len(r) for r in id_lists) if max_len is None else max_len
    out = torch.full((len(id_lists), L), pad_id, dtype=torch.int64)
    for b, r in enumerate(id_lists):
        for j, i in enumerate(r):
            if j >= L: break
            out[b, j] = int(i)
    return out

@A('pad_batch', 'W', 'pads on the left')
def pb_w1(id_lists, pad_id, max_len=None):
    t = pb_r1(id_lists, pad_id, max_len)
    for b, r in enumerate(id_lists):
        n = min(len(r), t.size(1))
        if n: t[b] = torch.cat([torch.full((t.size(1) - n,), pad_id), t[b, :n]])
    return t

@A('pad_batch', 'W', 'int32')
def pb_w2(id_lists, pad_id, max_len=None): return pb_r1(id_lists, pad_id, max_len).int()

@A('pad_batch', 'W', 'max_len only cuts, never pads up to it')
def pb_w3(id_lists, pad_id, max_len=None):
    L = max(len(r) for r in id_lists)
    if max_len is not None: L = min(L, max_len)
    return pb_r1(id_lists, pad_id, L)

@A('pad_batch', 'W', 'empty batch -> empty tensor')
def pb_w4(id_lists, pad_id, max_len=None):
    if len(id_lists) == 0: return torch.zeros(0, 0, dtype=torch.long)
    return pb_r1(id_lists, pad_id, max_len)

@A('pad_batch', 'W', 'keeps the last max_len ids')
def pb_w5(id_lists, pad_id, max_len=None):
    if max_len is None: return pb_r1(id_lists, pad_id)
    return pb_r1([list(r)[-max_len:] if len(r) > max_len else r for r in id_lists], pad_id, max_len)

@A('pad_batch', 'W', 'pads the input lists in place')
def pb_w6(id_lists, pad_id, max_len=None):
    if len(id_lists) == 0: raise ValueError("empty")
    L = max_len if max_len is not None else max(len(r) for r in id_lists)
    for r in id_lists:
        if isinstance(r, list):
            del r[L:]; r.extend([pad_id] * (L - len(r)))
    return torch.tensor([[int(i) for i in list(r)[:L]] + [pad_id] * (L - min(L, len(r))) for r in id_lists], dtype=torch.long)

@A('pad_batch', 'W', 'empty batch raises IndexError')
def pb_w7(id_lists, pad_id, max_len=None):
    L = max_len if max_len is not None else len(sorted(id_lists, key=len)[-1])
    return pb_r1(id_lists, pad_id, L)

@A('pad_batch', 'W', 'pads with 0, not pad_id')
def pb_w8(id_lists, pad_id, max_len=None): return pb_r1(id_lists, 0, max_len)
