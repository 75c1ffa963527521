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

# extra 02 answers
@A('decode', 'W', 'tensor elements used as dict keys (no int())')
def de_w8(ids, vocab, skip_specials=True):
    inv = _inv(vocab); toks = []
    for i in ids:
        t = inv[i]
        if skip_specials and t == "<eos>": break
        if skip_specials and t in SP: continue
        toks.append(t)
    return " ".join(toks)

@A('encode', 'W', 'cache keyed by sentence and id(vocab)')
def en_w9(sentence, vocab, add_bos=False, add_eos=False, _c={}):
    k = (sentence, id(vocab), add_bos, add_eos)
    if k not in _c: _c[k] = en_r1(sentence, vocab, add_bos, add_eos)
    return _c[k]

@A('build_vocab', 'W', 'specials numbered after the words')
def bv_w9(sentences, specials=SP):
    v = {}
    for s in sentences:
        for w in s.split():
            if w not in specials: v.setdefault(w, len(v))
    for t in specials: v.setdefault(t, len(v))
    return v

# ---------------- 03 embeddings ----------------
@A('embed', 'R', 'index_select on flattened ids, float64 scale then cast back')
def em_r1(token_ids, table, scale=True):
    out = table.index_select(0, token_ids.reshape(-1)).reshape(*token_ids.shape, table.shape[1])
    return (out.double() * math.sqrt(table.shape[1])).to(table.dtype) if scale else out

@A('embed', 'R', 'one loop over the batch, stack, times D ** 0.5')
def em_r2(token_ids, table, scale=True):
    out = torch.stack([table[row] for row in token_ids]) if token_ids.shape[0] else table[token_ids]
    return out * table.size(-1) ** 0.5 if scale else out

@A('embed', 'R', 'torch.take_along_dim / gather rows')
def em_r3(token_ids, table, scale=True):
    B, L = token_ids.shape; D = table.shape[1]
    idx = token_ids.reshape(-1, 1).expand(-1, D)
    out = torch.gather(table, 0, idx).reshape(B, L, D)
    return out * math.sqrt(D) if scale else out.clone()

@A('embed', 'W', 'int(sqrt(D))')
def em_w1(token_ids, table, scale=True):
    out = table[token_ids]; return out * int(math.sqrt(table.size(1))) if scale else out

@A('embed', 'W', 'scales by sqrt(V)')
def em_w2(token_ids, table, scale=True):
    out = table[token_ids]; return out * math.sqrt(table.size(0)) if scale else out

@A('embed', 'W', 'ignores scale=False')
def em_w3(token_ids, table, scale=True): return table[token_ids] * math.sqrt(table.size(1))

@A('embed', 'W', 'scales the table in place')
def em_w4(token_ids, table, scale=True):
    if scale:
        with torch.no_grad(): table.mul_(math.sqrt(table.size(1)))
    return table[token_ids]

@A('embed', 'W', 'sqrt(D) rounded to the dtype first (bf16: 5.66 -> 5.656)')
def em_w5(token_ids, table, scale=True):
    out = table[token_ids]
    return out * torch.tensor(math.sqrt(table.size(1)), dtype=torch.bfloat16).to(table.dtype) if scale else out

@A('embed', 'W', 'divides by sqrt(D)')
def em_w6(token_ids, table, scale=True):
    out = table[token_ids]; return out / math.sqrt(table.size(1)) if scale else out

@A('embed', 'W', 'one_hot matmul in float32 (returns float32)')
def em_w7(token_ids, table, scale=True):
    out = F.one_hot(token_ids, table.size(0)).float() @ table.float()
    return out * math.sqrt(table.size(1)) if scale else out
generics('embed', em_r2, ['f64', 'idcache', 'buffer', 'counter'])

@A('sinusoidal_positional_encoding', 'R', 'python loop with math.sin/cos')
def pe_r1(max_len, d_model):
    rows = [[(math.sin if j % 2 == 0 else math.cos)(p * 10000 ** (-(j - j % 2) / d_model)) for j in range(d_model)] for p in range(max_len)]
    return torch.tensor(rows, dtype=torch.float32)

@A('sinusoidal_positional_encoding', 'R', 'complex exponential (polar), float64, interleave by stack')
def pe_r2(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    freq = torch.pow(torch.tensor(10000.0, dtype=torch.float64), -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    z = torch.polar(torch.ones(max_len, d_model // 2, dtype=torch.float64), pos * freq)
    return torch.stack((z.imag, z.real), dim=-1).reshape(max_len, d_model).float()

@A('sinusoidal_positional_encoding', 'R', 'exp(-log(10000) * 2i / d) in float64, scatter by index')
def pe_r3(max_len, d_model):
    i = torch.arange(d_model // 2, dtype=torch.float64)
    ang = torch.outer(torch.arange(max_len, dtype=torch.float64), torch.exp(-math.log(10000.0) * 2 * i / d_model))
    pe = torch.empty(max_len, d_model, dtype=torch.float64)
    pe.index_copy_(1, 2 * i.long(), ang.sin()); pe.index_copy_(1, 2 * i.long() + 1, ang.cos())
    return pe.to(torch.float32)

def _pe(max_len, d_model, fn=lambda two_i, d: 10000 ** (-two_i / d), start=0, dtype=torch.float64):
    pos = torch.arange(start, start + max_len, dtype=dtype)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=dtype)
    a = pos * fn(two_i, d_model)
    pe = torch.zeros(max_len, d_model, dtype=dtype); pe[:, 0::2] = a.sin(); pe[:, 1::2] = a.cos()
    return pe.float()

@A('sinusoidal_positional_encoding', 'W', 'cos on even columns, sin on odd')
def pe_w1(max_len, d_model):
    pe = _pe(max_len, d_model); return pe.view(max_len, -1, 2).flip(-1).reshape(max_len, d_model)

@A('sinusoidal_positional_encoding', 'W', 'sin half then cos half (concatenated)')
def pe_w2(max_len, d_model):
    pe = _pe(max_len, d_model); return torch.cat([pe[:, 0::2], pe[:, 1::2]], dim=1)

@A('sinusoidal_positional_encoding', 'W', 'exponent uses the column j, not 2i')
def pe_w3(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]; j = torch.arange(d_model, dtype=torch.float64)
    a = pos * 10000 ** (-j / d_model); pe = torch.where(j.long() % 2 == 0, a.sin(), a.cos()); return pe.float()

@A('sinusoidal_positional_encoding', 'W', 'positions start at 1')
def pe_w4(max_len, d_model): return _pe(max_len, d_model, start=1)

@A('sinusoidal_positional_encoding', 'W', 'exponent -i/d (i, not 2i)')
def pe_w5(max_len, d_model): return _pe(max_len, d_model, fn=lambda two_i, d: 10000 ** (-(two_i / 2) / d))

@A('sinusoidal_positional_encoding', 'W', 'lru_cache returns the same tensor')
@functools.lru_cache(maxsize=None)
def pe_w6(max_len, d_model): return _pe(max_len, d_model)

@A('sinusoidal_positional_encoding', 'W', 'angles computed in float16')
def pe_w7(max_len, d_model): return _pe(max_len, d_model, dtype=torch.float16) if max_len < 2048 else _pe(max_len, d_model, dtype=torch.bfloat16)

@A('sinusoidal_positional_encoding', 'W', 'base 1000')
def pe_w8(max_len, d_model): return _pe(max_len, d_model, fn=lambda two_i, d: 1000.0 ** (-two_i / d))
generics('sinusoidal_positional_encoding', pe_r3, ['f64', 'shapecache', 'buffer'])

@A('add_positional_encoding', 'R', 'narrow + unsqueeze + torch.add')
def ap_r1(x, pe): return torch.add(x, pe.narrow(0, 0, x.shape[1]).unsqueeze(0))

@A('add_positional_encoding', 'R', 'loop over the batch, stack')
def ap_r2(x, pe): return torch.stack([x[b] + pe[:x.size(1)] for b in range(x.size(0))])

@A('add_positional_encoding', 'R', 'einsum-free expand then sum of a stacked pair')
def ap_r3(x, pe): return torch.stack((x, pe[:x.shape[-2]].expand_as(x)), 0).sum(0)

@A('add_positional_encoding', 'W', 'x += pe (in place)')
def ap_w1(x, pe):
    with torch.no_grad(): x += pe[:x.size(1)]
    return x

@A('add_positional_encoding', 'W', 'pe[:B] instead of pe[:L]')
def ap_w2(x, pe): return x + pe[:x.size(0)].unsqueeze(1) if x.size(0) != x.size(1) else x + pe[:x.size(1)]

@A('add_positional_encoding', 'W', 'the last L rows of pe')
def ap_w3(x, pe): return x + pe[pe.size(0) - x.size(1):]

@A('add_positional_encoding', 'W', 'pe rows from 1')
def ap_w4(x, pe): return x + torch.cat([pe[1:x.size(1) + 1], pe[:max(0, x.size(1) + 1 - pe.size(0))]])[:x.size(1)]

@A('add_positional_encoding', 'W', 'pe sliced then cast to float32')
def ap_w5(x, pe): return x + pe[:x.size(1)].float()

@A('add_positional_encoding', 'W', 'scales pe by sqrt(D) too')
def ap_w6(x, pe): return x + pe[:x.size(1)] * math.sqrt(x.size(-1))

@A('add_positional_encoding', 'W', 'adds the whole pe when max_len == L only, else pe[0] broadcast')
def ap_w7(x, pe): return x + (pe if pe.size(0) == x.size(1) else pe[:1])
generics('add_positional_encoding', ap_r1, ['f32', 'mutate', 'idcache', 'buffer', 'counter'])

def _rope_ref(x, positions=None, dtype=torch.float64):
    L, D = x.shape[-2], x.shape[-1]
    pos = torch.arange(L, dtype=dtype) if positions is None else positions.to(dtype)
    a = pos[:, None] * 10000.0 ** (-torch.arange(0, D, 2, dtype=dtype) / D)
    return a

@A('apply_rope', 'R', 'float32 pairs as complex numbers, cast back')
def rp_r1(x, positions=None):
    a = _rope_ref(x, positions)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    r = torch.view_as_real(z * torch.polar(torch.ones_like(a), a)).reshape(x.shape)
    return r.to(x.dtype)

@A('apply_rope', 'R', 'even/odd written out, stack, float64 angle, cos/sin cast')
def rp_r2(x, positions=None):
    a = _rope_ref(x, positions); c, s = a.cos().to(x.dtype), a.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)

@A('apply_rope', 'R', '2x2 rotation matrices via einsum in float64')
def rp_r3(x, positions=None):
    a = _rope_ref(x, positions); c, s = a.cos(), a.sin()
    R = torch.stack((torch.stack((c, -s), -1), torch.stack((s, c), -1)), -2)  # (L, D/2, 2, 2)
    pairs = x.double().unflatten(-1, (-1, 2))
    return torch.einsum('lkij,...lkj->...lki', R, pairs).flatten(-2).to(x.dtype)

@A('apply_rope', 'W', 'rotate-half (pairs i and i + D/2)')
def rp_w1(x, positions=None):
    a = _rope_ref(x, positions); c, s = a.cos().to(x.dtype), a.sin().to(x.dtype)
    h = x.shape[-1] // 2; x0, x1 = x[..., :h], x[..., h:]
    return torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), -1)

@A('apply_rope', 'W', 'angle computed in x.dtype')
def rp_w2(x, positions=None):
    a = _rope_ref(x, positions, dtype=x.dtype if x.dtype != torch.float64 else torch.float64)
    c, s = a.cos(), a.sin(); x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)

@A('apply_rope', 'W', 'positions ignored')
def rp_w3(x, positions=None): return rp_r2(x, None)

@A('apply_rope', 'W', 'rotates the other way')
def rp_w4(x, positions=None): return rp_r2(x, -(positions if positions is not None else torch.arange(x.shape[-2])))

@A('apply_rope', 'W', 'L taken from x.shape[1]')
def rp_w5(x, positions=None):
    L = x.shape[1]
    if positions is None: positions = torch.arange(L)
    a = positions.double()[:, None] * 10000.0 ** (-torch.arange(0, x.shape[-1], 2, dtype=torch.float64) / x.shape[-1])
    c, s = a.cos().to(x.dtype), a.sin().to(x.dtype); x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)

@A('apply_rope', 'W', 'rotates x in place')
def rp_w6(x, positions=None):
    out = rp_r2(x, positions)
    with torch.no_grad(): x.copy_(out)
    return x

@A('apply_rope', 'W', 'exponent -i/D')
def rp_w7(x, positions=None):
    L, D = x.shape[-2], x.shape[-1]
    pos = torch.arange(L, dtype=torch.float64) if positions is None else positions.double()
    a = pos[:, None] * 10000.0 ** (-torch.arange(D // 2, dtype=torch.float64) / D)
    c, s = a.cos().to(x.dtype), a.sin().to(x.dtype); x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)
generics('apply_rope', rp_r2, ['f32', 'mutate', 'idcache', 'buffer'])

# ---------------- 04 masks ----------------
@A('padding_mask', 'R', 'ne + two unsqueezes')
def pm_r1(token_ids, pad_id): return token_ids.ne(pad_id).unsqueeze(1).unsqueeze(1)

@A('padding_mask', 'R', '~(ids == pad) reshaped')
def pm_r2(token_ids, pad_id): B, L = token_ids.shape; return (~(token_ids == pad_id)).reshape(B, 1, 1, L)

@A('padding_mask', 'R', 'python loop into a bool tensor')
def pm_r3(token_ids, pad_id):
    B, L = token_ids.shape; m = torch.zeros(B, 1, 1, L, dtype=torch.bool)
    for b in range(B):
        for j in range(L): m[b, 0, 0, j] = bool(token_ids[b, j] != pad_id)
    return m

@A('padding_mask', 'W', 'ids > pad_id')
def pm_w1(token_ids, pad_id): return (token_ids > pad_id)[:, None, None, :]

@A('padding_mask', 'W', 'ids.bool() (nonzero)')
def pm_w2(token_ids, pad_id): return token_ids.bool()[:, None, None, :]

@A('padding_mask', 'W', '(B, 1, L, 1)')
def pm_w3(token_ids, pad_id): return (token_ids != pad_id)[:, None, :, None]

@A('padding_mask', 'W', 'long instead of bool')
def pm_w4(token_ids, pad_id): return (token_ids != pad_id).long()[:, None, None, :]

@A('padding_mask', 'W', 'True on pads')
def pm_w5(token_ids, pad_id): return (token_ids == pad_id)[:, None, None, :]

@A('padding_mask', 'W', 'pad id cached from the first call')
def pm_w6(token_ids, pad_id, _s={}):
    p = _s.setdefault('pad', pad_id); return (token_ids != p)[:, None, None, :]
generics('padding_mask', pm_r1, ['idcache', 'shapecache', 'buffer', 'counter'])

@A('causal_mask', 'R', 'arange comparison')
def cm_r1(seq_len): i = torch.arange(seq_len); return (i[None, :] <= i[:, None]).view(1, 1, seq_len, seq_len)

@A('causal_mask', 'R', 'not the strict upper triangle')
def cm_r2(seq_len): return torch.ones(seq_len, seq_len).triu(1).eq(0)[None, None]

@A('causal_mask', 'R', 'python nested lists')
def cm_r3(seq_len): return torch.tensor([[[[j <= i for j in range(seq_len)] for i in range(seq_len)]]], dtype=torch.bool)

@A('causal_mask', 'W', 'upper triangle')
def cm_w1(seq_len): return torch.ones(seq_len, seq_len, dtype=torch.bool).triu()[None, None]

@A('causal_mask', 'W', 'diagonal excluded')
def cm_w2(seq_len): return torch.ones(seq_len, seq_len, dtype=torch.bool).tril(-1)[None, None]

@A('causal_mask', 'W', '(L, L) without leading axes')
def cm_w3(seq_len): return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()

@A('causal_mask', 'W', 'float mask')
def cm_w4(seq_len): return torch.ones(seq_len, seq_len).tril()[None, None]

_CM = torch.ones(2048, 2048, dtype=torch.bool).tril()
@A('causal_mask', 'W', 'slice of a 2048 x 2048 module buffer')
def cm_w5(seq_len): return _CM[:seq_len, :seq_len][None, None]

@A('causal_mask', 'W', 'nn.Transformer.generate_square_subsequent_mask == 0 (forbidden)')
def cm_w6(seq_len): return (torch.nn.Transformer.generate_square_subsequent_mask(seq_len) == 0)[None, None]

@A('causal_mask', 'W', 'lru_cache')
@functools.lru_cache(maxsize=None)
def cm_w7(seq_len): return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()[None, None]

@A('causal_mask', 'W', 'uint8')
def cm_w8(seq_len): return torch.ones(seq_len, seq_len, dtype=torch.uint8).tril()[None, None]

@A('target_mask', 'R', 'my two functions')
def tm_r1(token_ids, pad_id): return pm_r1(token_ids, pad_id) & cm_r1(token_ids.shape[1])

@A('target_mask', 'R', "tfmlib's padding_mask and causal_mask (allowed)")
def tm_r2(token_ids, pad_id):
    from tfmlib import padding_mask, causal_mask
    return padding_mask(token_ids, pad_id) & causal_mask(token_ids.size(1))

@A('target_mask', 'R', 'one broadcast expression with arange')
def tm_r3(token_ids, pad_id):
    L = token_ids.size(-1); i = torch.arange(L, device=token_ids.device)
    return torch.logical_and((token_ids != pad_id)[:, None, None, :], (i[None, :] <= i[:, None]))

@A('target_mask', 'W', 'OR instead of AND')
def tm_w1(token_ids, pad_id): return pm_r1(token_ids, pad_id) | cm_r1(token_ids.shape[1])

@A('target_mask', 'W', 'padded query rows masked too')
def tm_w2(token_ids, pad_id):
    real = token_ids != pad_id
    return (real[:, None, :, None] & real[:, None, None, :]) & cm_r1(token_ids.shape[1])

@A('target_mask', 'W', 'causal transposed (triu)')
def tm_w3(token_ids, pad_id): return pm_r1(token_ids, pad_id) & cm_w1(token_ids.shape[1])

@A('target_mask', 'W', '(B, L, L) without the head axis')
def tm_w4(token_ids, pad_id): return (pm_r1(token_ids, pad_id) & cm_r1(token_ids.shape[1]))[:, 0]

@A('target_mask', 'W', 'L from token_ids.size(0)')
def tm_w5(token_ids, pad_id):
    n = token_ids.size(0)
    c = cm_r1(n)
    return pm_r1(token_ids, pad_id) & c if n == token_ids.size(1) else pm_r1(token_ids, pad_id) & cm_r1(token_ids.size(1)).transpose(-1, -2)

@A('target_mask', 'W', 'pad_id ignored (0)')
def tm_w6(token_ids, pad_id): return pm_r1(token_ids, 0) & cm_r1(token_ids.shape[1])

@A('target_mask', 'W', 'causal from a 512 buffer (slice, no copy)')
def tm_w7(token_ids, pad_id):
    L = token_ids.size(1); c = _CM[:512, :512][:L, :L]
    return pm_r1(token_ids, pad_id) & c
generics('target_mask', tm_r1, ['idcache', 'shapecache', 'counter'])

# ---------------- 05 attention ----------------
HALF = (torch.float16, torch.bfloat16)
NEG = float("-inf")

@A('scaled_dot_product_attention', 'R', 'hand softmax in float32 inside, safe denominator, cast back')
def at_r1(query, key, value, mask=None):
    dt = query.dtype; ct = torch.float32 if dt in HALF else dt
    s = (query.to(ct) @ key.to(ct).transpose(-2, -1)) / math.sqrt(query.shape[-1])
    if mask is not None: s = s.masked_fill(~mask, NEG)
    m = s.amax(-1, keepdim=True); m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m); den = e.sum(-1, keepdim=True)
    w = e / torch.where(den > 0, den, torch.ones_like(den))
    return (w @ value.to(ct)).to(dt), w.to(dt)

@A('scaled_dot_product_attention', 'R', 'einsum, -inf fill, softmax, nan_to_num')
def at_r2(query, key, value, mask=None):
    s = torch.einsum('...qd,...kd->...qk', query, key) / math.sqrt(query.size(-1))
    if mask is not None: s = s.masked_fill(mask.logical_not(), NEG)
    w = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)
    return torch.einsum('...qk,...kv->...qv', w, value), w

@A('scaled_dot_product_attention', 'R', 'finfo(dtype).min fill, then zero masked weights')
def at_r3(query, key, value, mask=None):
    s = (query / math.sqrt(query.size(-1))) @ key.mT
    if mask is not None: s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = s.softmax(-1)
    if mask is not None: w = w.masked_fill(~mask, 0.0)
    return w @ value, w

@A('scaled_dot_product_attention', 'R', 'float64 inside, cast back')
def at_r4(query, key, value, mask=None):
    dt = query.dtype
    c, w = at_r3(query.double(), key.double(), value.double(), mask)
    return c.to(dt), w.to(dt)

@A('scaled_dot_product_attention', 'R', 'scale after the matmul (as the demo cell), -inf, where')
def at_r5(query, key, value, mask=None):
    s = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None: s = s.masked_fill(~mask, NEG)
    w = torch.softmax(s, dim=-1)
    if mask is not None: w = torch.where(mask, w, torch.zeros((), dtype=w.dtype))
    return w @ value, w

@A('scaled_dot_product_attention', 'R', 'key scaled instead of query, my own stable softmax via logsumexp')
def at_r6(query, key, value, mask=None):
    s = query @ (key / math.sqrt(key.size(-1))).transpose(-1, -2)
    if mask is not None: s = s.masked_fill(~mask, NEG)
    lse = torch.logsumexp(s.float(), -1, keepdim=True)
    w = torch.exp(s.float() - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))).to(s.dtype)
    return w @ value, w

def _att(query, key, value, mask=None, scale=None, fill=NEG, dim=-1, zero=True, tr=lambda k: k.transpose(-2, -1)):
    s = query @ tr(key) / (scale if scale is not None else math.sqrt(query.size(-1)))
    if mask is not None: s = s.masked_fill(~mask, fill)
    w = torch.softmax(s, dim=dim)
    if mask is not None and zero: w = torch.where(mask, w, 0.0)
    return w @ value, w

@A('scaled_dot_product_attention', 'W', 'key.transpose(1, 2) (right on 3-D only)')
def at_w1(q, k, v, mask=None): return _att(q, k, v, mask, tr=lambda k: k.transpose(1, 2))

@A('scaled_dot_product_attention', 'W', 'fill -1e9')
def at_w2(q, k, v, mask=None): return _att(q, k, v, mask, fill=-1e9)

@A('scaled_dot_product_attention', 'W', 'fill -1e4')
def at_w3(q, k, v, mask=None): return _att(q, k, v, mask, fill=-1e4)

@A('scaled_dot_product_attention', 'W', 'no zeroing: NaN on fully masked rows')
def at_w4(q, k, v, mask=None): return _att(q, k, v, mask, zero=False)

@A('scaled_dot_product_attention', 'W', 'additive -inf mask + nan_to_num')
def at_w5(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None: s = s + torch.zeros_like(s).masked_fill(~mask, NEG)
    w = torch.nan_to_num(torch.softmax(s, -1)); return w @ v, w

@A('scaled_dot_product_attention', 'W', 'softmax over queries (dim=-2)')
def at_w6(q, k, v, mask=None): return _att(q, k, v, mask, dim=-2)

@A('scaled_dot_product_attention', 'W', 'scale sqrt(d_v)')
def at_w7(q, k, v, mask=None): return _att(q, k, v, mask, scale=math.sqrt(v.size(-1)))

_AT = {}
@A('scaled_dot_product_attention', 'W', 'scale remembered from the first call')
def at_w8(q, k, v, mask=None):
    return _att(q, k, v, mask, scale=_AT.setdefault('s', math.sqrt(q.size(-1))))

@A('scaled_dot_product_attention', 'W', 'hand softmax without max subtraction')
def at_w9(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    e = torch.exp(s)
    if mask is not None: e = e * mask
    den = e.sum(-1, keepdim=True); w = e / torch.where(den > 0, den, torch.ones_like(den))
    return w @ v, w

@A('scaled_dot_product_attention', 'W', 'context from NaN weights, then nan_to_num on the context')
def at_w10(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None: s = s.masked_fill(~mask, NEG)
    w = torch.softmax(s, -1)
    ctx = torch.nan_to_num(w @ v)
    return ctx, torch.nan_to_num(w)

@A('scaled_dot_product_attention', 'W', 'scores times mask (masked score 0)')
def at_w11(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None: s = s * mask
    w = torch.softmax(s, -1)
    if mask is not None: w = w * mask
    return w @ v, w

@A('scaled_dot_product_attention', 'W', 'renormalised after zeroing with +1e-9')
def at_w12(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    w = torch.softmax(s, -1)
    if mask is not None:
        w = w * mask; w = w / (w.sum(-1, keepdim=True) + 1e-9)
    return w @ v, w

@A('scaled_dot_product_attention', 'W', 'F.scaled_dot_product_attention for the context (forbidden)')
def at_w13(q, k, v, mask=None):
    c = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return torch.nan_to_num(c), _att(q, k, v, mask)[1]

@A('scaled_dot_product_attention', 'W', 'fill float16 min (-65504) for every dtype')
def at_w14(q, k, v, mask=None): return _att(q, k, v, mask, fill=-65504.0)
generics('scaled_dot_product_attention', at_r5, ['f32', 'mutate', 'idcache', 'buffer', 'counter'])

# ---------------- 06 multi-head ----------------
@A('linear', 'R', 'einsum')
def li_r1(x, weight, bias=None):
    y = torch.einsum('...i,oi->...o', x, weight)
    return y if bias is None else y + bias

@A('linear', 'R', 'addmm on a 2-D reshape, reshaped back')
def li_r2(x, weight, bias=None):
    x2 = x.reshape(-1, x.shape[-1])
    y = torch.addmm(bias, x2, weight.t()) if bias is not None else x2.mm(weight.t())
    return y.reshape(*x.shape[:-1], weight.shape[0])

@A('linear', 'R', 'weight @ column vector, float64 inside')
def li_r3(x, weight, bias=None):
    y = (weight.double() @ x.double().unsqueeze(-1)).squeeze(-1)
    if bias is not None: y = y + bias.double()
    return y.to(x.dtype)

@A('linear', 'W', 'no transpose (x @ weight)')
def li_w1(x, weight, bias=None):
    y = x @ weight if weight.shape[0] == weight.shape[1] else x @ weight.T
    return y if bias is None else y + bias

@A('linear', 'W', 'bias ignored')
def li_w2(x, weight, bias=None): return x @ weight.T

@A('linear', 'W', 'if bias: (truth of a tensor)')
def li_w3(x, weight, bias=None):
    y = x @ weight.T
    if bias: y = y + bias
    return y

@A('linear', 'W', 'torch.mm (2-D only)')
def li_w4(x, weight, bias=None):
    y = torch.mm(x, weight.t()); return y if bias is None else y + bias

@A('linear', 'W', '1-D x comes back (1, out)')
def li_w5(x, weight, bias=None):
    if x.dim() == 1: x = x.unsqueeze(0)
    return li_r1(x, weight, bias)

@A('linear', 'W', 'F.linear (forbidden)')
def li_w6(x, weight, bias=None): return F.linear(x, weight, bias)

@A('linear', 'W', 'bias added before the matmul')
def li_w7(x, weight, bias=None):
    if bias is None or weight.shape[0] != weight.shape[1]: return li_r1(x, weight, bias)
    return (x + bias) @ weight.T
generics('linear', li_r1, ['f32', 'mutate', 'idcache', 'buffer', 'counter'])

@A('split_heads', 'R', 'reshape + permute')
def sh_r1(x, num_heads):
    B, L, D = x.shape; return x.reshape(B, L, num_heads, D // num_heads).permute(0, 2, 1, 3)

@A('split_heads', 'R', 'stack of chunks')
def sh_r2(x, num_heads): return torch.stack(x.chunk(num_heads, dim=-1), dim=1)

@A('split_heads', 'R', 'unflatten + movedim, contiguous')
def sh_r3(x, num_heads): return x.unflatten(-1, (num_heads, -1)).movedim(2, 1).contiguous()

@A('split_heads', 'W', 'reshape straight to (B, H, L, d_k)')
def sh_w1(x, num_heads): B, L, D = x.shape; return x.reshape(B, num_heads, L, D // num_heads)

@A('split_heads', 'W', '.view (fails on non-contiguous input)')
def sh_w2(x, num_heads): B, L, D = x.shape; return x.view(B, L, num_heads, D // num_heads).transpose(1, 2)

@A('split_heads', 'W', '(B, L, d_k, H) then permute: interleaved heads')
def sh_w3(x, num_heads): B, L, D = x.shape; return x.reshape(B, L, D // num_heads, num_heads).permute(0, 3, 1, 2)

@A('split_heads', 'W', 'transpose first, then reshape')
def sh_w4(x, num_heads): B, L, D = x.shape; return x.transpose(1, 2).reshape(B, num_heads, L, D // num_heads)

@A('split_heads', 'W', 'returns (B, L, H, d_k)')
def sh_w5(x, num_heads): B, L, D = x.shape; return x.reshape(B, L, num_heads, D // num_heads)

@A('split_heads', 'W', 'num_heads remembered from the first call')
def sh_w6(x, num_heads, _s={}): return sh_r1(x, _s.setdefault('h', num_heads))
generics('split_heads', sh_r1, ['f32', 'mutate', 'idcache', 'buffer'])

@A('merge_heads', 'R', 'permute + reshape')
def mh_r1(x): B, H, L, d = x.shape; return x.permute(0, 2, 1, 3).reshape(B, L, H * d)

@A('merge_heads', 'R', 'cat of unbind over heads')
def mh_r2(x): return torch.cat(x.unbind(1), dim=-1)

@A('merge_heads', 'R', 'transpose + flatten(2)')
def mh_r3(x): return x.transpose(1, 2).flatten(2)

@A('merge_heads', 'W', 'reshape straight')
def mh_w1(x): B, H, L, d = x.shape; return x.reshape(B, L, H * d)

@A('merge_heads', 'W', 'transpose then view')
def mh_w2(x): B, H, L, d = x.shape; return x.transpose(1, 2).view(B, L, H * d)

@A('merge_heads', 'W', 'interleaved (d_k before H)')
def mh_w3(x): B, H, L, d = x.shape; return x.permute(0, 2, 3, 1).reshape(B, L, H * d)

@A('merge_heads', 'W', 'transpose(1, 3)')
def mh_w4(x): B, H, L, d = x.shape; return x.transpose(1, 3).reshape(B, L, H * d) if L == d else x.permute(0, 2, 3, 1).reshape(B, L, H * d)

@A('merge_heads', 'W', 'B and H read swapped')
def mh_w5(x): H, B, L, d = x.shape; return x.permute(1, 2, 0, 3).reshape(B, L, H * d).reshape(x.shape[0], L, -1) if B == H else x.transpose(0, 1).transpose(1, 2).reshape(B, L, H * d)
generics('merge_heads', mh_r1, ['f32', 'mutate', 'idcache', 'buffer'])

@A('multi_head_attention', 'R', 'my own linear/split/merge/attention, params["b_q"]')
def mha_r1(query, key, value, params, num_heads, mask=None):
    q = sh_r1(li_r1(query, params["w_q"], params["b_q"]), num_heads)
    k = sh_r1(li_r1(key, params["w_k"], params["b_k"]), num_heads)
    v = sh_r1(li_r1(value, params["w_v"], params["b_v"]), num_heads)
    ctx, w = at_r5(q, k, v, mask)
    return li_r1(mh_r1(ctx), params["w_o"], params["b_o"]), w

@A('multi_head_attention', 'R', 'loop over heads with weight slices, tfmlib attention, cat')
def mha_r2(query, key, value, params, num_heads, mask=None):
    from tfmlib import scaled_dot_product_attention
    D = query.size(-1); dk = D // num_heads; ctxs, ws = [], []
    def proj(x, n, h):
        W = params["w_" + n][h * dk:(h + 1) * dk]; b = params.get("b_" + n)
        y = x @ W.T
        return y + b[h * dk:(h + 1) * dk] if b is not None else y
    for h in range(num_heads):
        m = mask
        if m is not None and m.dim() == 4 and m.size(1) > 1: m = m[:, h]
        elif m is not None and m.dim() == 4: m = m[:, 0]
        c, w = scaled_dot_product_attention(proj(query, "q", h), proj(key, "k", h), proj(value, "v", h), m)
        ctxs.append(c); ws.append(w)
    out = torch.cat(ctxs, -1) @ params["w_o"].T
    if params.get("b_o") is not None: out = out + params["b_o"]
    return out, torch.stack(ws, 1)

@A('multi_head_attention', 'R', 'einsum with weights viewed (H, d_k, D), float32 attention inside')
def mha_r3(query, key, value, params, num_heads, mask=None):
    D = query.size(-1); H = num_heads; dk = D // H
    def proj(x, n):
        y = torch.einsum('bld,hkd->bhlk', x, params["w_" + n].reshape(H, dk, D))
        b = params.get("b_" + n)
        return y if b is None else y + b.reshape(H, 1, dk)
    ctx, w = at_r1(proj(query, "q"), proj(key, "k"), proj(value, "v"), mask)
    out = torch.einsum('bhlk,ehk->ble', ctx, params["w_o"].reshape(D, H, dk))
    if params.get("b_o") is not None: out = out + params["b_o"]
    return out, w

def _mha(query, key, value, params, H, mask=None, wo=True, sh=sh_r1, mh=mh_r1, att=at_r5, kv=('k', 'v'), self_att=False):
    if self_att: key = value = query
    q = sh(li_r1(query, params["w_q"], params["b_q"]), H)
    k = sh(li_r1(key, params["w_" + kv[0]], params["b_" + kv[0]]), H)
    v = sh(li_r1(value, params["w_" + kv[1]], params["b_" + kv[1]]), H)
    ctx, w = att(q, k, v, mask)
    m = mh(ctx)
    return (li_r1(m, params["w_o"], params["b_o"]) if wo else m), w

@A('multi_head_attention', 'W', 'no output projection')
def mha_w1(q, k, v, p, H, mask=None): return _mha(q, k, v, p, H, mask, wo=False)

@A('multi_head_attention', 'W', 'weights averaged over heads')
def mha_w2(q, k, v, p, H, mask=None): o, w = _mha(q, k, v, p, H, mask); return o, w.mean(1)

@A('multi_head_attention', 'W', 'mask not passed on')
def mha_w3(q, k, v, p, H, mask=None): return _mha(q, k, v, p, H, None)

@A('multi_head_attention', 'W', 'scaled by sqrt(d_model)')
def mha_w4(q, k, v, p, H, mask=None): return _mha(q, k, v, p, H, mask, att=lambda a, b, c, m: _att(a, b, c, m, scale=math.sqrt(a.size(-1) * H)))

@A('multi_head_attention', 'W', 'w_k applied to value, w_v to key')
def mha_w5(q, k, v, p, H, mask=None): return _mha(q, k, v, p, H, mask, kv=('v', 'k'))

@A('multi_head_attention', 'W', 'self-attention assumed (key = value = query)')
def mha_w6(q, k, v, p, H, mask=None): return _mha(q, k, v, p, H, mask, self_att=True)

@A('multi_head_attention', 'W', 'split by reshape straight to heads')
def mha_w7(q, k, v, p, H, mask=None): return _mha(q, k, v, p, H, mask, sh=sh_w1)

@A('multi_head_attention', 'W', 'merge without transpose')
def mha_w8(q, k, v, p, H, mask=None): return _mha(q, k, v, p, H, mask, mh=mh_w1)

@A('multi_head_attention', 'W', 'b_o added before w_o')
def mha_w9(q, k, v, p, H, mask=None):
    o, w = _mha(q, k, v, p, H, mask, wo=False); return (o + p["b_o"]) @ p["w_o"].T, w

@A('multi_head_attention', 'W', 'attention filled with -1e9 (fp16 inf)')
def mha_w10(q, k, v, p, H, mask=None): return _mha(q, k, v, p, H, mask, att=at_w2)
generics('multi_head_attention', mha_r1, ['f32', 'mutate', 'idcache', 'buffer', 'counter'])

# ---------------- 07 sublayers ----------------
@A('feed_forward', 'R', 'F.linear twice + clamp(min=0)')
def ff_r1(x, params):
    return F.linear(F.linear(x, params["w_1"], params["b_1"]).clamp(min=0), params["w_2"], params["b_2"])

@A('feed_forward', 'R', "tfmlib's linear (imported by 07) + torch.maximum")
def ff_r2(x, params):
    from tfmlib import linear
    h = linear(x, params["w_1"], params["b_1"])
    return linear(torch.maximum(h, torch.zeros((), dtype=h.dtype)), params["w_2"], params["b_2"])

@A('feed_forward', 'R', 'my einsum linear, relu, float32 inside for half, cast back')
def ff_r3(x, params):
    ct = torch.float32 if x.dtype in HALF else x.dtype
    p = {k: v.to(ct) for k, v in params.items()}
    h = torch.relu(li_r1(x.to(ct), p["w_1"], p["b_1"]))
    return li_r1(h, p["w_2"], p["b_2"]).to(x.dtype)

@A('feed_forward', 'R', 'h * (h > 0)')
def ff_r4(x, params):
    h = x @ params["w_1"].T + params["b_1"]
    return (h * (h > 0)) @ params["w_2"].T + params["b_2"]

@A('feed_forward', 'W', 'gelu')
def ff_w1(x, params): return li_r1(F.gelu(li_r1(x, params["w_1"], params["b_1"])), params["w_2"], params["b_2"])

@A('feed_forward', 'W', 'relu after the second layer too')
def ff_w2(x, params): return torch.relu(ff_r1(x, params))

@A('feed_forward', 'W', 'b_1 left out')
def ff_w3(x, params): return li_r1(torch.relu(li_r1(x, params["w_1"])), params["w_2"], params["b_2"])

@A('feed_forward', 'W', 'leaky relu 0.01')
def ff_w4(x, params): return li_r1(F.leaky_relu(li_r1(x, params["w_1"], params["b_1"])), params["w_2"], params["b_2"])

@A('feed_forward', 'W', 'relu before the first layer')
def ff_w5(x, params): return li_r1(li_r1(torch.relu(x), params["w_1"], params["b_1"]), params["w_2"], params["b_2"])

@A('feed_forward', 'W', 'relu6 (clamp at 6)')
def ff_w6(x, params): return li_r1(F.relu6(li_r1(x, params["w_1"], params["b_1"])), params["w_2"], params["b_2"])

@A('feed_forward', 'W', 'relu in place on the input when hidden is x-sized')
def ff_w7(x, params):
    with torch.no_grad(): torch.relu_(x)
    return ff_r1(x, params)
generics('feed_forward', ff_r1, ['f32', 'mutate', 'idcache', 'buffer', 'counter'])

@A('dropout', 'R', 'rand >= p, torch.where')
def do_r1(x, p, training=True):
    if not training: return x
    keep = torch.rand(x.shape, device=x.device) >= p
    return torch.where(keep, x / (1 - p), torch.zeros((), dtype=x.dtype))

@A('dropout', 'R', 'bernoulli on a float32 full(1 - p)')
def do_r2(x, p, training=True):
    if not training or p == 0: return x
    keep = torch.bernoulli(torch.full(x.shape, 1.0 - p))
    return x * keep.to(x.dtype) / (1.0 - p)

@A('dropout', 'R', 'rand < 1 - p, masked_fill, times 1/(1-p)')
def do_r3(x, p, training=True):
    if not training: return x
    keep = torch.rand(x.shape) < 1 - p
    return x.masked_fill(~keep, 0) * (1.0 / (1.0 - p))

@A('dropout', 'R', 'float64 uniform numbers')
def do_r4(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape, dtype=torch.float64) >= p) / (1 - p)

@A('dropout', 'W', 'rand_like(x) in the half dtype')
def do_w1(x, p, training=True):
    if not training: return x
    return x * (torch.rand_like(x) >= p) / (1 - p)

@A('dropout', 'W', 'no rescaling')
def do_w2(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape) >= p)

@A('dropout', 'W', 'multiplies by 1 - p')
def do_w3(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape) >= p) * (1 - p)

@A('dropout', 'W', 'keeps with probability p')
def do_w4(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape) < p) / (1 - p)

@A('dropout', 'W', 'one mask per feature, shared over rows')
def do_w5(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape[-1]) >= p) / (1 - p)

@A('dropout', 'W', 'torch.manual_seed(0) inside')
def do_w6(x, p, training=True):
    if not training: return x
    g = torch.Generator().manual_seed(0)
    return x * (torch.rand(x.shape, generator=g) >= p) / (1 - p)

@A('dropout', 'W', 'dropout also when not training')
def do_w7(x, p, training=True): return x * (torch.rand(x.shape) >= p) / (1 - p)

@A('dropout', 'W', 'exact count by randperm')
def do_w8(x, p, training=True):
    if not training: return x
    n = x.numel(); k = round(p * n); keep = torch.ones(n, dtype=torch.bool); keep[torch.randperm(n)[:k]] = False
    return x * keep.view(x.shape) / (1 - p)

@A('dropout', 'W', 'mask cached per shape')
def do_w9(x, p, training=True, _c={}):
    if not training: return x
    k = (tuple(x.shape), p)
    if k not in _c: _c[k] = torch.rand(x.shape) >= p
    return x * _c[k] / (1 - p)

@A('dropout', 'W', 'in place x.mul_')
def do_w10(x, p, training=True):
    if not training: return x
    with torch.no_grad(): return x.mul_((torch.rand(x.shape) >= p) / (1 - p))

@A('dropout', 'W', 'F.dropout (forbidden)')
def do_w11(x, p, training=True): return F.dropout(x, p, training)

@A('dropout', 'W', 'rand in float16 then compared (p tiny rounds)')
def do_w12(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape).half() >= p) / (1 - p)

@A('dropout', 'W', 'returns x.clone() * 1 when p == 0 but x unchanged when... divides by (1 - p) twice')
def do_w13(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape) >= p) / (1 - p) / (1 - p)

@A('layer_norm', 'R', 'float32 inside, hand-written biased variance, cast back')
def ln_r1(x, gamma, beta, eps=1e-5):
    ct = torch.float32 if x.dtype in HALF else x.dtype
    xc = x.to(ct); m = xc.mean(-1, keepdim=True); var = ((xc - m) ** 2).mean(-1, keepdim=True)
    return ((xc - m) / torch.sqrt(var + eps) * gamma.to(ct) + beta.to(ct)).to(x.dtype)

@A('layer_norm', 'R', 'var_mean(correction=0) + rsqrt + addcmul')
def ln_r2(x, gamma, beta, eps=1e-5):
    var, m = torch.var_mean(x, dim=-1, correction=0, keepdim=True)
    return torch.addcmul(beta, (x - m) * torch.rsqrt(var + eps), gamma)

@A('layer_norm', 'R', 'float64 one-pass E[x^2] - E[x]^2, cast back')
def ln_r3(x, gamma, beta, eps=1e-5):
    xd = x.double(); m = xd.mean(-1, keepdim=True); var = (xd * xd).mean(-1, keepdim=True) - m * m
    return ((xd - m) / (var.clamp_min(0) + eps).sqrt() * gamma.double() + beta.double()).to(x.dtype)

@A('layer_norm', 'R', 'sum / D by hand, einsum for the squares in float32')
def ln_r4(x, gamma, beta, eps=1e-5):
    D = x.shape[-1]; xf = x.float() if x.dtype != torch.float64 else x
    m = xf.sum(-1, keepdim=True) / D; c = xf - m
    var = torch.einsum('...d,...d->...', c, c).unsqueeze(-1) / D
    return (c / (var + eps) ** 0.5 * gamma + beta).to(x.dtype)

def _ln(x, gamma, beta, eps=1e-5, unbiased=False, outside=False, dim=-1):
    m = x.mean(dim, keepdim=True); var = x.var(dim, keepdim=True, unbiased=unbiased)
    d = (var.sqrt() + eps) if outside else (var + eps).sqrt()
    return (x - m) / d * gamma + beta

@A('layer_norm', 'W', 'unbiased variance')
def ln_w1(x, gamma, beta, eps=1e-5): return _ln(x, gamma, beta, eps, unbiased=True)

@A('layer_norm', 'W', 'eps outside the root')
def ln_w2(x, gamma, beta, eps=1e-5): return _ln(x, gamma, beta, eps, outside=True)

@A('layer_norm', 'W', 'Annotated Transformer std + 1e-6')
def ln_w3(x, gamma, beta, eps=1e-6): return gamma * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps) + beta

@A('layer_norm', 'W', 'gamma and beta ignored')
def ln_w4(x, gamma, beta, eps=1e-5): return _ln(x, 1.0, 0.0, eps)

@A('layer_norm', 'W', 'squares in the half dtype')
def ln_w5(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True); var = ((x - m) ** 2).mean(-1, keepdim=True)
    return (x - m) / torch.sqrt(var + eps) * gamma + beta

@A('layer_norm', 'W', 'gamma and beta swapped')
def ln_w6(x, gamma, beta, eps=1e-5): return _ln(x, beta, gamma, eps)

@A('layer_norm', 'W', 'default eps 1e-6')
def ln_w7(x, gamma, beta, eps=1e-6): return _ln(x, gamma, beta, eps)

@A('layer_norm', 'W', 'one-pass E[x^2] - E[x]^2 in x dtype')
def ln_w8(x, gamma, beta, eps=1e-5):
    ct = torch.float32 if x.dtype in HALF else x.dtype
    xc = x.to(ct); m = xc.mean(-1, keepdim=True); var = (xc * xc).mean(-1, keepdim=True) - m * m
    return ((xc - m) / (var + eps).sqrt() * gamma.to(ct) + beta.to(ct)).to(x.dtype)

@A('layer_norm', 'W', 'in place x -= mean')
def ln_w9(x, gamma, beta, eps=1e-5):
    with torch.no_grad():
        m = x.mean(-1, keepdim=True); x -= m
    return x / (x.var(-1, keepdim=True, unbiased=False) + eps).sqrt() * gamma + beta

@A('layer_norm', 'W', 'normalised over the token axis (dim -2) when x is 3-D')
def ln_w10(x, gamma, beta, eps=1e-5): return _ln(x, gamma, beta, eps, dim=-2 if x.dim() >= 2 else -1)
generics('layer_norm', ln_r2, ['f32', 'mutate', 'idcache', 'buffer', 'counter'])

@A('residual_sublayer', 'R', 'my layer_norm')
def rs_r1(x, sublayer, norm, norm_first=False):
    if norm_first: return x + sublayer(ln_r1(x, norm["gamma"], norm["beta"]))
    return ln_r1(x + sublayer(x), norm["gamma"], norm["beta"])

@A('residual_sublayer', 'R', "tfmlib's layer_norm, torch.add")
def rs_r2(x, sublayer, norm, norm_first=False):
    from tfmlib import layer_norm
    g, b = norm["gamma"], norm["beta"]
    return torch.add(x, sublayer(layer_norm(x, g, b))) if norm_first else layer_norm(torch.add(x, sublayer(x)), g, b)

@A('residual_sublayer', 'R', 'my var_mean layer_norm, one branch variable')
def rs_r3(x, sublayer, norm, norm_first=False):
    ln = lambda t: ln_r2(t, norm["gamma"], norm["beta"])
    branch = sublayer(ln(x) if norm_first else x)
    out = x + branch
    return out if norm_first else ln(out)

@A('residual_sublayer', 'W', 'Pre and Post swapped')
def rs_w1(x, sublayer, norm, norm_first=False): return rs_r1(x, sublayer, norm, not norm_first)

@A('residual_sublayer', 'W', 'Post-LN without the residual')
def rs_w2(x, sublayer, norm, norm_first=False):
    if norm_first: return x + sublayer(ln_r1(x, norm["gamma"], norm["beta"]))
    return ln_r1(sublayer(x), norm["gamma"], norm["beta"])

@A('residual_sublayer', 'W', 'Pre-LN normalises the sum too')
def rs_w3(x, sublayer, norm, norm_first=False):
    g, b = norm["gamma"], norm["beta"]
    if norm_first: return ln_r1(x + sublayer(ln_r1(x, g, b)), g, b)
    return ln_r1(x + sublayer(x), g, b)

@A('residual_sublayer', 'W', 'sublayer called twice')
def rs_w4(x, sublayer, norm, norm_first=False):
    g, b = norm["gamma"], norm["beta"]
    h = ln_r1(x, g, b) if norm_first else x
    sublayer(h)
    return x + sublayer(h) if norm_first else ln_r1(x + sublayer(h), g, b)

@A('residual_sublayer', 'W', 'sublayer per token')
def rs_w5(x, sublayer, norm, norm_first=False):
    g, b = norm["gamma"], norm["beta"]
    h = ln_r1(x, g, b) if norm_first else x
    s = torch.cat([sublayer(h[:, i:i + 1]) for i in range(h.size(1))], 1)
    return x + s if norm_first else ln_r1(x + s, g, b)

@A('residual_sublayer', 'W', 'sublayer per sample')
def rs_w6(x, sublayer, norm, norm_first=False):
    g, b = norm["gamma"], norm["beta"]
    h = ln_r1(x, g, b) if norm_first else x
    s = torch.cat([sublayer(h[i:i + 1]) for i in range(h.size(0))], 0)
    return x + s if norm_first else ln_r1(x + s, g, b)

@A('residual_sublayer', 'W', 'x += sublayer(...) in place')
def rs_w7(x, sublayer, norm, norm_first=False):
    g, b = norm["gamma"], norm["beta"]
    with torch.no_grad():
        if norm_first: x += sublayer(ln_r1(x, g, b)); return x
        x += sublayer(x); return ln_r1(x, g, b)

@A('residual_sublayer', 'W', 'Pre-LN residual from LN(x)')
def rs_w8(x, sublayer, norm, norm_first=False):
    g, b = norm["gamma"], norm["beta"]
    if norm_first: h = ln_r1(x, g, b); return h + sublayer(h)
    return ln_r1(x + sublayer(x), g, b)

@A('residual_sublayer', 'W', 'Post-LN as x + LN(sublayer(x))')
def rs_w9(x, sublayer, norm, norm_first=False):
    g, b = norm["gamma"], norm["beta"]
    if norm_first: return x + sublayer(ln_r1(x, g, b))
    return x + ln_r1(sublayer(x), g, b)

@A('residual_sublayer', 'W', 'eps 1e-6 in the norm')
def rs_w10(x, sublayer, norm, norm_first=False):
    g, b = norm["gamma"], norm["beta"]
    if norm_first: return x + sublayer(ln_r1(x, g, b, 1e-6))
    return ln_r1(x + sublayer(x), g, b, 1e-6)
generics('residual_sublayer', rs_r1, ['f32', 'idcache', 'buffer', 'counter'])

# ---------------- fourth batch: tuple-aware buffer, textbook float32 numerics, more subtle mistakes ----------------
def W_tuple_buffer(fn):   # like W_buffer, but for functions that return (context, weights)
    bufs = {}
    @functools.wraps(fn)
    def g(*a, **k):
        outs = fn(*a, **k); res = []
        for i, o in enumerate(outs):
            b = bufs.get(i)
            if b is None or b.numel() < o.numel() or b.dtype != o.dtype:
                b = bufs[i] = torch.empty(o.numel() * 2, dtype=o.dtype)
            else: b = bufs[i] = b.detach()
            v = b[:o.numel()].view(o.shape); v.copy_(o); res.append(v)
        return tuple(res)
    return g
A('scaled_dot_product_attention', 'W', 'tuple buffer (views of my own buffers)')(W_tuple_buffer(at_r5))
A('multi_head_attention', 'W', 'tuple buffer (views of my own buffers)')(W_tuple_buffer(mha_r1))

@A('scaled_dot_product_attention', 'R', 'logsumexp softmax, float32 only for half dtypes')
def at_r7(query, key, value, mask=None):
    s = query @ (key / math.sqrt(key.size(-1))).transpose(-1, -2)
    if mask is not None: s = s.masked_fill(~mask, NEG)
    ct = torch.float32 if s.dtype in HALF else s.dtype
    lse = torch.logsumexp(s.to(ct), -1, keepdim=True)
    w = torch.exp(s.to(ct) - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))).to(s.dtype)
    return w @ value, w

@A('scaled_dot_product_attention', 'R', 'rows with no visible key zeroed by mask.any(-1)')
def at_r8(query, key, value, mask=None):
    s = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is None:
        w = s.softmax(-1); return w @ value, w
    w = s.masked_fill(~mask, NEG).softmax(-1)
    w = torch.where(mask.any(-1, keepdim=True), w, torch.zeros((), dtype=w.dtype))
    return w @ value, w

@A('scaled_dot_product_attention', 'W', 'scaled by sqrt(Lq)')
def at_w15(q, k, v, mask=None): return _att(q, k, v, mask, scale=math.sqrt(q.size(-2)))

@A('scaled_dot_product_attention', 'W', 'key reshaped to (d_k, Lk) instead of transposed')
def at_w16(q, k, v, mask=None): return _att(q, k, v, mask, tr=lambda k: k.reshape(*k.shape[:-2], k.shape[-1], k.shape[-2]))

@A('multi_head_attention', 'W', 'b_k left out (softmax-invariant)')
def mha_w11(q, k, v, p, H, mask=None):
    p2 = dict(p); p2["b_k"] = torch.zeros_like(p["b_k"]) if p.get("b_k") is not None else None
    return _mha(q, k, v, p2, H, mask) if p2["b_k"] is not None else mha_r2(q, k, v, p, H, mask)

@A('multi_head_attention', 'W', 'first head weights copied to every head')
def mha_w12(q, k, v, p, H, mask=None): o, w = mha_r1(q, k, v, p, H, mask); return o, w[:, :1].expand_as(w).clone()

@A('multi_head_attention', 'W', 'mask given an extra head axis (unsqueeze(1))')
def mha_w13(q, k, v, p, H, mask=None): return mha_r1(q, k, v, p, H, None if mask is None else mask.unsqueeze(1))

@A('dropout', 'W', 'rand in float32, cast to x dtype before comparing')
def do_w14(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape).to(x.dtype) >= p) / (1 - p)

@A('dropout', 'W', 'rand rounded to bfloat16 before comparing, any x dtype')
def do_w15(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape).bfloat16() >= p) / (1 - p)

@A('layer_norm', 'W', 'mean as x.sum / D in the half dtype (sum overflows)')
def ln_w11(x, gamma, beta, eps=1e-5):
    m = x.sum(-1, keepdim=True) / x.size(-1); var = x.var(-1, keepdim=True, unbiased=False)
    return (x - m) / torch.sqrt(var + eps) * gamma + beta

@A('layer_norm', 'W', 'sqrt(var) + sqrt(eps)')
def ln_w12(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True); var = x.var(-1, keepdim=True, unbiased=False)
    return (x - m) / (var.sqrt() + math.sqrt(eps)) * gamma + beta

@A('residual_sublayer', 'W', 'Post-LN feeds the sublayer LN(x) too')
def rs_w11(x, sublayer, norm, norm_first=False):
    g, b = norm["gamma"], norm["beta"]
    if norm_first: return x + sublayer(ln_r1(x, g, b))
    return ln_r1(x + sublayer(ln_r1(x, g, b)), g, b)

@A('broadcast_shape', 'W', 'compares with is')
def bs_w9(a, b):
    one = 1
    n = max(len(a), len(b)); pa = (1,) * (n - len(a)) + tuple(a); pb = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x is not y and x is not one and y is not one: raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x is one else x)
    return tuple(out)

@A('build_vocab', 'W', 'words deduplicated by a set')
def bv_w10(sentences, specials=SP):
    v = {t: i for i, t in enumerate(specials)}
    for w in {w for s in sentences for w in s.split()}: v.setdefault(w, len(v))
    return v

@A('pad_batch', 'W', 'raises when a list is longer than max_len')
def pb_w9(id_lists, pad_id, max_len=None):
    if max_len is not None and any(len(r) > max_len for r in id_lists): raise ValueError("max_len: a list is longer")
    return pb_r1(id_lists, pad_id, max_len)

@A('embed', 'W', 'scales by sqrt(L)')
def em_w8(token_ids, table, scale=True):
    out = table[token_ids]; return out * math.sqrt(token_ids.shape[-1]) if scale else out

@A('sinusoidal_positional_encoding', 'R', 'Annotated Transformer style, all in float32')
def pe_r4(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term); pe[:, 1::2] = torch.cos(position * div_term)
    return pe

@A('apply_rope', 'R', 'LLaMA style: angles in float32, complex multiply in float32, cast back')
def rp_r4(x, positions=None):
    L, D = x.shape[-2], x.shape[-1]
    freqs = 1.0 / (10000.0 ** (torch.arange(0, D, 2)[: D // 2].float() / D))
    t = torch.arange(L, dtype=torch.float32) if positions is None else positions.float()
    cis = torch.polar(torch.ones(L, D // 2), torch.outer(t, freqs))
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous())
    out = torch.view_as_real(xc * cis).flatten(-2)
    return out.to(x.dtype) if x.dtype != torch.float64 else rp_r2(x, positions)

@A('split_heads', 'R', '.view of the feature axis, then transpose (works on transposed views)')
def sh_r4(x, num_heads): B, L, D = x.shape; return x.view(B, L, num_heads, D // num_heads).transpose(1, 2)

# ---------------- fifth batch: built-ins under other names, and more ----------------
@A('embed', 'R', 'F.embedding (03 names no forbidden built-in)')
def em_r4(token_ids, table, scale=True):
    out = F.embedding(token_ids, table); return out * math.sqrt(table.size(1)) if scale else out

@A('layer_norm', 'R', 'F.group_norm with one group (not the named built-in)')
def ln_r5(x, gamma, beta, eps=1e-5):
    D = x.shape[-1]; flat = x.reshape(-1, 1, D)
    return F.group_norm(flat, 1, eps=eps).reshape(x.shape) * gamma + beta

@A('layer_norm', 'W', 'torch.layer_norm (F.layer_norm under another name)')
def ln_w13(x, gamma, beta, eps=1e-5): return torch.layer_norm(x, (x.shape[-1],), gamma, beta, eps)

@A('layer_norm', 'W', 'torch.native_layer_norm')
def ln_w14(x, gamma, beta, eps=1e-5): return torch.native_layer_norm(x, (x.shape[-1],), gamma, beta, eps)[0]

@A('dropout', 'W', 'torch.dropout (F.dropout under another name)')
def do_w16(x, p, training=True): return torch.dropout(x, p, training)

@A('dropout', 'W', 'torch.nn.functional.dropout1d on a reshaped view')
def do_w17(x, p, training=True):
    if not training: return x
    return F.dropout1d(x.reshape(-1, x.numel(), 1), p, True).reshape(x.shape) if x.numel() else x

@A('scaled_dot_product_attention', 'W', 'torch._C._nn.scaled_dot_product_attention (the built-in under another name)')
def at_w17(q, k, v, mask=None):
    c = torch._C._nn.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    w = _att(q, k, v, mask)[1]
    return torch.where(w.sum(-1, keepdim=True) > 0, c, torch.zeros((), dtype=c.dtype)), w

@A('linear', 'W', 'torch._C._nn.linear (F.linear under another name)')
def li_w8(x, weight, bias=None): return torch._C._nn.linear(x, weight, bias)

@A('causal_mask', 'W', 'nn.modules.transformer._generate_square_subsequent_mask (the built-in under another name)')
def cm_w9(seq_len):
    from torch.nn.modules.transformer import _generate_square_subsequent_mask
    return (_generate_square_subsequent_mask(seq_len) == 0)[None, None]

@A('broadcast_shape', 'W', 'torch.broadcast_tensors on zero-stride views (PyTorch broadcasting as the oracle)')
def bs_w10(a, b):
    try:
        ta, tb = torch.broadcast_tensors(torch.zeros(()).expand(tuple(a)), torch.zeros(()).expand(tuple(b)))
    except RuntimeError as e:
        raise ValueError(str(e)) from None
    return tuple(ta.shape)

@A('scaled_dot_product_attention', 'W', 'finfo.min fill, no zeroing (uniform weights on a fully masked row)')
def at_w18(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None: s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = s.softmax(-1); return w @ v, w

@A('layer_norm', 'W', 'gamma applied before normalising')
def ln_w15(x, gamma, beta, eps=1e-5):
    y = x * gamma; m = y.mean(-1, keepdim=True); var = y.var(-1, keepdim=True, unbiased=False)
    return (y - m) / torch.sqrt(var + eps) + beta

# ---------------- sixth batch ----------------
@A('decode', 'W', 'skip_specials=False trims trailing <pad>s')
def de_w9(ids, vocab, skip_specials=True):
    if skip_specials: return de_r1(ids, vocab, True)
    toks = [_inv(vocab)[int(i)] for i in ids]
    while toks and toks[-1] == "<pad>": toks.pop()
    return " ".join(toks)

_LT = {}
@A('linear', 'W', 'transposed weight cached by id(weight)')
def li_w9(x, weight, bias=None):
    wt = _LT.setdefault(id(weight), weight.T.contiguous())
    if wt.shape != weight.T.shape or wt.dtype != weight.dtype: wt = _LT[id(weight)] = weight.T.contiguous()
    y = x @ wt; return y if bias is None else y + bias

@A('multi_head_attention', 'W', 'b_o left out')
def mha_w14(q, k, v, p, H, mask=None): p2 = dict(p); p2["b_o"] = torch.zeros_like(p["w_o"][0]); return _mha(q, k, v, p2, H, mask)

@A('multi_head_attention', 'W', 'b_v left out')
def mha_w15(q, k, v, p, H, mask=None): p2 = dict(p); p2["b_v"] = torch.zeros_like(p["w_v"][0]); return _mha(q, k, v, p2, H, mask)

@A('feed_forward', 'W', 'b_2 left out')
def ff_w8(x, params): return li_r1(torch.relu(li_r1(x, params["w_1"], params["b_1"])), params["w_2"])
