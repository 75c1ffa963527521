from harness import *
import itertools, numpy as np
import torch.nn.functional as F
# ---------------- 01 broadcast_shape
E='broadcast_shape'
@A(E,'R','zip_longest from the right')
def bs_r(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))
@A(E,'R','pad shorter with 1s, index loop')
def bs_r2(a, b):
    n = max(len(a), len(b)); a = (1,)*(n-len(a)) + tuple(a); b = (1,)*(n-len(b)) + tuple(b)
    res = []
    for i in range(n):
        if a[i] == b[i] or b[i] == 1: res.append(a[i])
        elif a[i] == 1: res.append(b[i])
        else: raise ValueError(f"axis {i-n}: {a[i]} vs {b[i]}")
    return tuple(res)
@A(E,'R','recursive')
def bs_r3(a, b):
    if not a: return tuple(b)
    if not b: return tuple(a)
    x, y = a[-1], b[-1]
    if x != y and 1 not in (x, y): raise ValueError(f"size {x} clashes with size {y}")
    return bs_r3(a[:-1], b[:-1]) + (max(x, y) if 1 in (x, y) and x != y else x,)
@A(E,'W','max of sizes (0 stretched)')
def bs_w1(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x != y and x != 1 and y != 1: raise ValueError(f"sizes {x} and {y} clash")
        out.append(max(x, y))
    return tuple(reversed(out))
@A(E,'W','is instead of ==')
def bs_w2(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if not (x is y) and x != 1 and y != 1: raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))
@A(E,'W','aligned from the left')
def bs_w3(a, b):
    out = []
    for x, y in itertools.zip_longest(a, b, fillvalue=1):
        if x != y and x != 1 and y != 1: raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(out)
@A(E,'W','message names no size')
def bs_w4(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x != y and x != 1 and y != 1: raise ValueError("shapes do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))
@A(E,'W','raises AssertionError')
def bs_w5(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        assert x == y or x == 1 or y == 1, f"sizes {x} and {y} clash"
        out.append(y if x == 1 else x)
    return tuple(reversed(out))
@A(E,'W','returns a list')
def bs_w6(a, b): return list(bs_r(a, b))
@A(E,'W','only b stretches')
def bs_w7(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x != y and y != 1: raise ValueError(f"sizes {x} and {y} clash")
        out.append(x)
    return tuple(reversed(out))
@A(E,'W','hard-coded example (3, 4)')
def bs_w8(a, b): return (3, 4)
@A(E,'W','uses torch.broadcast_shapes')
def bs_w9(a, b): return tuple(torch.broadcast_shapes(a, b))
@A(E,'W','zip (truncates longer shape)')
def bs_w10(a, b):
    out = []
    for x, y in zip(reversed(a), reversed(b)):
        if x != y and x != 1 and y != 1: raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))
@A(E,'W','max up to 4 axes only (hard-coded pad)')
def bs_w11(a, b):
    a = (1,)*(4-len(a)) + tuple(a); b = (1,)*(4-len(b)) + tuple(b)
    out = [];
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1: raise ValueError(f"sizes {x} and {y} clash")
        out.append(y if x == 1 else x)
    while len(out) > max(len(a), len(b)) or (out and out[0] == 1 and len(out) > 0 and False): pass
    return tuple(out[4 - max(len([s for s in a]), 0):]) if False else tuple(out[-max(len(a), len(b)):])
@A(E,'W','returns numpy int64 sizes via np.maximum')
def bs_w12(a, b):
    r = bs_r(a, b); return tuple(np.int64(s) for s in r) if r != tuple(np.maximum(1,1) for _ in ()) else r
# (12 is arguably right: values compare equal)

# ---------------- 02 tokenization
SP = ("<pad>", "<bos>", "<eos>", "<unk>")
E='build_vocab'
@A(E,'R','loop + split()')
def bv_r(sentences, specials=SP):
    v = {}
    for s in specials: v.setdefault(s, len(v))
    for s in sentences:
        for w in s.split():
            if w not in v: v[w] = len(v)
    return v
@A(E,'R','dict.fromkeys')
def bv_r2(sentences, specials=SP):
    return {t: i for i, t in enumerate(dict.fromkeys([*specials, *(w for s in sentences for w in s.split())]))}
@A(E,'W','split(" ") with empties dropped')
def bv_w1(sentences, specials=SP):
    v = {s: i for i, s in enumerate(specials)}
    for s in sentences:
        for w in s.split(" "):
            if w and w not in v: v[w] = len(v)
    return v
@A(E,'W','lowercases')
def bv_w2(sentences, specials=SP): return bv_r([s.lower() for s in sentences], specials)
@A(E,'W','sorted words')
def bv_w3(sentences, specials=SP):
    words = sorted({w for s in sentences for w in s.split()} - set(specials))
    return {t: i for i, t in enumerate([*specials, *words])}
@A(E,'W','specials last')
def bv_w4(sentences, specials=SP):
    v = {}
    for s in sentences:
        for w in s.split():
            if w not in v and w not in specials: v[w] = len(v)
    for s in specials: v[s] = len(v)
    return v
@A(E,'W','ids with gaps (enumerate over all words)')
def bv_w5(sentences, specials=SP):
    v = {s: i for i, s in enumerate(specials)}
    words = [w for s in sentences for w in s.split()]
    for i, w in enumerate(words):
        if w not in v: v[w] = len(specials) + i
    return v
@A(E,'W','strips punctuation')
def bv_w6(sentences, specials=SP):
    import string
    return bv_r([" ".join(w.strip(string.punctuation) or w for w in s.split()) for s in sentences], specials)
@A(E,'W','default specials ignored (always SP)')
def bv_w7(sentences, specials=SP): return bv_r(sentences, SP)
@A(E,'W','word equal to a special gets a new id')
def bv_w8(sentences, specials=SP):
    v = {s: i for i, s in enumerate(specials)}
    n = len(v); seen = set()
    for s in sentences:
        for w in s.split():
            if w not in seen:
                seen.add(w); v[w] = n; n += 1
    return v
@A(E,'W','split(" ") keeping empty strings')
def bv_w9(sentences, specials=SP):
    v = {s: i for i, s in enumerate(specials)}
    for s in sentences:
        for w in s.split(" "):
            if w not in v: v[w] = len(v)
    return v
@A(E,'W','global vocab kept between calls')
def _mk():
    G = {}
    def bv(sentences, specials=SP):
        if not G:
            for s in specials: G.setdefault(s, len(G))
        for s in sentences:
            for w in s.split():
                if w not in G: G[w] = len(G)
        return dict(G)
    return bv
bv_w10 = _mk(); ANS[-1] = ('build_vocab','W','global vocab kept between calls', bv_w10)

E='encode'
@A(E,'R','get with unk')
def en_r(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w, vocab["<unk>"]) for w in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])
@A(E,'R','insert/append')
def en_r2(sentence, vocab, add_bos=False, add_eos=False):
    out = []
    for w in sentence.split():
        out.append(vocab[w] if w in vocab else vocab["<unk>"])
    if add_bos: out.insert(0, vocab["<bos>"])
    if add_eos: out.append(vocab["<eos>"])
    return out
@A(E,'W','split(" ") dropping empties')
def en_w1(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w, vocab["<unk>"]) for w in sentence.split(" ") if w]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])
@A(E,'W','KeyError on unknown')
def en_w2(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab[w] for w in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])
@A(E,'W','unk hard-coded 3')
def en_w3(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w, 3) for w in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])
@A(E,'W','bos/eos hard-coded 1/2')
def en_w4(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w, vocab["<unk>"]) for w in sentence.split()]
    return ([1] if add_bos else []) + ids + ([2] if add_eos else [])
@A(E,'W','returns a tensor')
def en_w5(sentence, vocab, add_bos=False, add_eos=False): return torch.tensor(en_r(sentence, vocab, add_bos, add_eos))
@A(E,'W','lowercases')
def en_w6(sentence, vocab, add_bos=False, add_eos=False): return en_r(sentence.lower(), vocab, add_bos, add_eos)
@A(E,'W','eos and bos swapped')
def en_w7(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w, vocab["<unk>"]) for w in sentence.split()]
    return ([vocab["<eos>"]] if add_bos else []) + ids + ([vocab["<bos>"]] if add_eos else [])
@A(E,'W','specials typed in text not mapped (strips <..>)')
def en_w8(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w, vocab["<unk>"]) for w in sentence.split() if not (w.startswith("<") and w.endswith(">"))]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])
@A(E,'W','split(" ") keeping empties')
def en_w9(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w, vocab["<unk>"]) for w in sentence.split(" ")]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])
@A(E,'W','strip punctuation before lookup')
def en_w10(sentence, vocab, add_bos=False, add_eos=False):
    import string
    ids = [vocab.get(w, vocab.get(w.strip(string.punctuation), vocab["<unk>"])) for w in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])
@A(E,'W','split on spaces and tabs only (re.split("[ \\t]+"))')
def en_w11(sentence, vocab, add_bos=False, add_eos=False):
    import re
    ids = [vocab.get(w, vocab["<unk>"]) for w in re.split(r"[ \t]+", sentence.strip(" \t")) if w]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])

E='decode'
SPS = set(SP)
@A(E,'R','invert + break')
def de_r(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
        t = inv[int(i)]
        if skip_specials and t == "<eos>": break
        if skip_specials and t in SPS: continue
        out.append(t)
    return " ".join(out)
@A(E,'R','index of eos, then filter')
def de_r2(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    toks = [inv[int(i)] for i in ids]
    if skip_specials:
        if "<eos>" in toks: toks = toks[:toks.index("<eos>")]
        toks = [t for t in toks if t not in SPS]
    return " ".join(toks)
@A(E,'W','cut at the last eos')
def de_w1(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    toks = [inv[int(i)] for i in ids]
    if skip_specials:
        if "<eos>" in toks: toks = toks[:len(toks) - 1 - toks[::-1].index("<eos>")]
        toks = [t for t in toks if t not in SPS]
    return " ".join(toks)
@A(E,'W','list(vocab)[i] (dict order)')
def de_w2(ids, vocab, skip_specials=True):
    keys = list(vocab)
    out = []
    for i in ids:
        t = keys[int(i)]
        if skip_specials and t == "<eos>": break
        if skip_specials and t in SPS: continue
        out.append(t)
    return " ".join(out)
@A(E,'W','specials by id < 4')
def de_w3(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in ids:
        i = int(i)
        if skip_specials and inv[i] == "<eos>": break
        if skip_specials and i < 4: continue
        out.append(inv[i])
    return " ".join(out)
@A(E,'W','stops at eos also when skip_specials=False')
def de_w4(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in ids:
        t = inv[int(i)]
        if t == "<eos>": break
        if skip_specials and t in SPS: continue
        out.append(t)
    return " ".join(out)
@A(E,'W','keeps <unk>')
def de_w5(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in ids:
        t = inv[int(i)]
        if skip_specials and t == "<eos>": break
        if skip_specials and t in ("<pad>", "<bos>"): continue
        out.append(t)
    return " ".join(out)
@A(E,'W','trailing space')
def de_w6(ids, vocab, skip_specials=True):
    r = de_r(ids, vocab, skip_specials); return r + " " if r else r
@A(E,'W','specials = anything in <...>')
def de_w7(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in ids:
        t = inv[int(i)]
        if skip_specials and t == "<eos>": break
        if skip_specials and t.startswith("<") and t.endswith(">"): continue
        out.append(t)
    return " ".join(out)
@A(E,'W','no int() on tensor elements')
def de_w8(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in ids:
        t = inv[i] if not isinstance(i, torch.Tensor) else inv.get(i, "?")
        if skip_specials and t == "<eos>": break
        if skip_specials and t in SPS: continue
        out.append(t)
    return " ".join(out)
@A(E,'W','join with ""')
def de_w9(ids, vocab, skip_specials=True): return de_r(ids, vocab, skip_specials).replace(" ", "")
@A(E,'W','removes every eos, no cut')
def de_w10(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    return " ".join(t for t in (inv[int(i)] for i in ids) if not (skip_specials and t in SPS))
@A(E,'W','skips ids 0..3 via vocab values of specials present, eos by id 2')
def de_w11(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in ids:
        i = int(i)
        if skip_specials and i == 2: break
        if skip_specials and inv[i] in SPS: continue
        out.append(inv[i])
    return " ".join(out)

E='pad_batch'
@A(E,'R','torch.full + slices')
def pb_r(id_lists, pad_id, max_len=None):
    if len(id_lists) == 0: raise ValueError("id_lists: empty batch")
    L = max_len if max_len is not None else max(len(x) for x in id_lists)
    out = torch.full((len(id_lists), L), pad_id, dtype=torch.long)
    for i, ids in enumerate(id_lists):
        ids = list(ids)[:L]
        if ids: out[i, :len(ids)] = torch.tensor([int(t) for t in ids], dtype=torch.long)
    return out
@A(E,'R','list padding then torch.tensor')
def pb_r2(id_lists, pad_id, max_len=None):
    if not id_lists: raise ValueError("cannot pad an empty batch")
    L = max_len if max_len is not None else max(map(len, id_lists))
    rows = [[int(t) for t in ids][:L] + [pad_id] * (L - min(len(ids), L)) for ids in id_lists]
    return torch.tensor(rows, dtype=torch.long).reshape(len(rows), L)
@A(E,'W','pads on the left')
def pb_w1(id_lists, pad_id, max_len=None):
    L = max_len if max_len is not None else max(len(x) for x in id_lists)
    rows = [[pad_id] * (L - min(len(ids), L)) + list(ids)[:L] for ids in id_lists]
    return torch.tensor(rows, dtype=torch.long).reshape(len(rows), L)
@A(E,'W','pads with 0')
def pb_w2(id_lists, pad_id, max_len=None): return pb_r(id_lists, 0, max_len)
@A(E,'W','int32')
def pb_w3(id_lists, pad_id, max_len=None): return pb_r(id_lists, pad_id, max_len).int()
@A(E,'W','max_len does not cut')
def pb_w4(id_lists, pad_id, max_len=None):
    L = max(max_len or 0, max(len(x) for x in id_lists))
    return pb_r(id_lists, pad_id, L)
@A(E,'W','extends the input lists in place')
def pb_w5(id_lists, pad_id, max_len=None):
    L = max_len if max_len is not None else max(len(x) for x in id_lists)
    for ids in id_lists:
        if isinstance(ids, list): ids.extend([pad_id] * (L - len(ids)))
    return pb_r(id_lists, pad_id, L)
@A(E,'W','max_len or longest (0 treated as None)')
def pb_w6(id_lists, pad_id, max_len=None):
    L = max_len or max(len(x) for x in id_lists)
    return pb_r(id_lists, pad_id, L)
@A(E,'W','float tensor')
def pb_w7(id_lists, pad_id, max_len=None): return pb_r(id_lists, pad_id, max_len).float()
@A(E,'W','empty batch returns empty tensor')
def pb_w8(id_lists, pad_id, max_len=None):
    if not id_lists: return torch.zeros(0, 0, dtype=torch.long)
    return pb_r(id_lists, pad_id, max_len)
generics(E, pb_r, ['counter'])

# ---------------- 03 embeddings
E='embed'
@A(E,'R','index * math.sqrt')
def em_r(token_ids, table, scale=True):
    out = table[token_ids]
    return out * math.sqrt(table.size(-1)) if scale else out
@A(E,'R','F.embedding')
def em_r2(token_ids, table, scale=True):
    out = F.embedding(token_ids, table)
    return out * table.shape[1] ** 0.5 if scale else out
@A(E,'R','index_select + reshape')
def em_r3(token_ids, table, scale=True):
    out = table.index_select(0, token_ids.reshape(-1)).reshape(*token_ids.shape, table.size(1))
    if scale: out = out * math.sqrt(table.size(1))
    return out
@A(E,'W','sqrt(V)')
def em_w1(token_ids, table, scale=True):
    out = table[token_ids]
    return out * math.sqrt(table.size(0)) if scale else out
@A(E,'W','divides')
def em_w2(token_ids, table, scale=True):
    out = table[token_ids]
    return out / math.sqrt(table.size(-1)) if scale else out
@A(E,'W','float32 scale tensor')
def em_w3(token_ids, table, scale=True):
    out = table[token_ids]
    return out * torch.sqrt(torch.tensor(float(table.size(-1)))) if scale else out
@A(E,'W','scales the table in place')
def em_w4(token_ids, table, scale=True):
    if scale:
        with torch.no_grad(): table.mul_(math.sqrt(table.size(-1)))
    return table[token_ids]
@A(E,'W','ignores scale')
def em_w5(token_ids, table, scale=True): return table[token_ids] * math.sqrt(table.size(-1))
@A(E,'W','one-hot float32 matmul')
def em_w6(token_ids, table, scale=True):
    out = F.one_hot(token_ids, table.size(0)).float() @ table.float()
    return out * math.sqrt(table.size(-1)) if scale else out
@A(E,'W','scale by D (not sqrt)')
def em_w7(token_ids, table, scale=True):
    out = table[token_ids]
    return out * table.size(-1) if scale else out
@A(E,'W','2-D ids only: table[ids.T].T')
def em_w8(token_ids, table, scale=True):
    out = table[token_ids.flatten()].view(token_ids.shape[1], token_ids.shape[0], -1).transpose(0, 1)
    return out * math.sqrt(table.size(-1)) if scale else out
generics(E, em_r, ['f32', 'f64', 'idcache', 'buffer'])

E='sinusoidal_positional_encoding'
@A(E,'R','exp/log, slices')
def pe_r(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(pos * div); pe[:, 1::2] = torch.cos(pos * div)
    return pe
@A(E,'R','pow in float64, stack/flatten, cast')
def pe_r2(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    ang = pos * 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.stack([ang.sin(), ang.cos()], dim=-1).flatten(1).float()
@A(E,'R','loop over column pairs')
def pe_r3(max_len, d_model):
    pe = torch.empty(max_len, d_model)
    p = torch.arange(max_len, dtype=torch.float32)
    for i in range(d_model // 2):
        f = 10000 ** (-2 * i / d_model)
        pe[:, 2 * i] = torch.sin(p * f); pe[:, 2 * i + 1] = torch.cos(p * f)
    return pe
@A(E,'W','exponent i/d instead of 2i/d')
def pe_w1(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    div = 10000.0 ** (-torch.arange(0, d_model // 2, dtype=torch.float32) / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(pos * div); pe[:, 1::2] = torch.cos(pos * div)
    return pe
@A(E,'W','sin/cos swapped')
def pe_w2(max_len, d_model):
    pe = pe_r(max_len, d_model); return pe.view(max_len, -1, 2).flip(-1).reshape(max_len, d_model)
@A(E,'W','halves instead of interleave')
def pe_w3(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    div = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    return torch.cat([torch.sin(pos * div), torch.cos(pos * div)], dim=1)
@A(E,'W','5000-row table sliced (view of one shared tensor)')
def _mk():
    T = pe_r(5000, 512)
    cache = {}
    def pe(max_len, d_model):
        if d_model not in cache: cache[d_model] = pe_r(5000, d_model)
        return cache[d_model][:max_len]
    return pe
ANS[-1] = (E, 'W', '5000-row table per d_model, sliced (shared view)', _mk())
@A(E,'W','float64 output')
def pe_w5(max_len, d_model): return pe_r2(max_len, d_model).double()
@A(E,'W','positions from 1')
def pe_w6(max_len, d_model):
    pos = torch.arange(1, max_len + 1, dtype=torch.float32)[:, None]
    div = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    pe = torch.zeros(max_len, d_model); pe[:, 0::2] = torch.sin(pos * div); pe[:, 1::2] = torch.cos(pos * div)
    return pe
@A(E,'W','integer division in exponent')
def pe_w7(max_len, d_model):
    pe = torch.zeros(max_len, d_model); p = torch.arange(max_len, dtype=torch.float32)
    for i in range(d_model // 2):
        f = 10000 ** (-(2 * i // d_model))
        pe[:, 2 * i] = torch.sin(p * f); pe[:, 2 * i + 1] = torch.cos(p * f)
    return pe
@A(E,'W','frequencies for d_model=16 hard-coded')
def pe_w8(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    div = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / 16)
    pe = torch.zeros(max_len, d_model); pe[:, 0::2] = torch.sin(pos * div); pe[:, 1::2] = torch.cos(pos * div)
    return pe
@A(E,'W','1024-row cache, longer tables computed, shared view')
def _mk2():
    T = {}
    def pe(max_len, d_model):
        if max_len > 1024: return pe_r(max_len, d_model)
        if d_model not in T: T[d_model] = pe_r(1024, d_model)
        return T[d_model][:max_len]
    return pe
ANS[-1] = (E, 'W', '1024-row cached table, shared view', _mk2())
generics(E, pe_r, ['shapecache', 'buffer'])

E='add_positional_encoding'
@A(E,'R','x + pe[:L]')
def ap_r(x, pe): return x + pe[:x.size(1)]
@A(E,'R','unsqueeze + narrow')
def ap_r2(x, pe): return x + pe.narrow(0, 0, x.shape[1]).unsqueeze(0)
@A(E,'W','in place x += pe[:L]')
def ap_w1(x, pe):
    x += pe[:x.size(1)]; return x
@A(E,'W','pe[:B] (axis 0)')
def ap_w2(x, pe): return x + pe[:x.size(0)].unsqueeze(1)
@A(E,'W','whole table (no slice), expand')
def ap_w3(x, pe): return x + pe[:x.size(-2)].to(torch.float32)
@A(E,'W','pe cast to float32')
def ap_w4(x, pe): return (x.float() + pe[:x.size(1)].float())
@A(E,'W','scales x by sqrt(D) again')
def ap_w5(x, pe): return x * math.sqrt(x.size(-1)) + pe[:x.size(1)]
@A(E,'W','pe[:D] (wrong axis)')
def ap_w6(x, pe): return x + pe[:x.size(-1)][:x.size(1)] if x.size(-1) >= x.size(1) else x + pe[:x.size(-1)]
@A(E,'W','reshape instead of slice to L rows')
def ap_w7(x, pe): return x + pe.reshape(-1)[:x.size(1) * x.size(2)].reshape(x.size(1), x.size(2)).t().reshape(x.size(1), x.size(2)) if x.size(1) != x.size(2) or True else None
generics(E, ap_r, ['f64', 'mutate', 'idcache', 'buffer'])

E='apply_rope'
def _rope(x, positions, half_dtype=None, style='pairs', sign=1, start=0, two_i=True):
    L, D = x.shape[-2], x.shape[-1]
    if positions is None: positions = torch.arange(start, L + start)
    i = torch.arange(0, D, 2, dtype=torch.float32) if two_i else torch.arange(0, D // 2, dtype=torch.float32)
    ang = positions.to(torch.float32)[:, None] * 10000.0 ** (-i / D)
    cos, sin = ang.cos(), sign * ang.sin()
    if half_dtype is None: cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if style == 'pairs':
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
    x0, x1 = x[..., :D // 2], x[..., D // 2:]
    return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
@A(E,'R','stack/flatten, cos/sin in x dtype')
def ro_r(x, positions=None): return _rope(x, positions)
@A(E,'R','complex numbers (float32 then back)')
def ro_r2(x, positions=None):
    L, D = x.shape[-2:]
    if positions is None: positions = torch.arange(L)
    ang = positions.double()[:, None] * 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], D // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(ang), ang)).flatten(-2).to(x.dtype)
@A(E,'R','out = empty_like, slice assignment')
def ro_r3(x, positions=None):
    L, D = x.shape[-2:]
    p = torch.arange(L, device=x.device) if positions is None else positions
    ang = p[:, None].to(torch.float64) * torch.pow(10000.0, -torch.arange(0, D, 2, dtype=torch.float64) / D)
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    out = torch.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    out[..., 1::2] = x[..., 0::2] * s + x[..., 1::2] * c
    return out
@A(E,'W','cos/sin left float32')
def ro_w1(x, positions=None): return _rope(x, positions, half_dtype=True)
@A(E,'W','rotate-half (NeoX)')
def ro_w2(x, positions=None): return _rope(x, positions, style='half')
@A(E,'W','opposite rotation')
def ro_w3(x, positions=None): return _rope(x, positions, sign=-1)
@A(E,'W','positions from 1')
def ro_w4(x, positions=None): return _rope(x, positions, start=1)
@A(E,'W','ignores positions')
def ro_w5(x, positions=None): return _rope(x, None)
@A(E,'W','angle uses i, not 2i')
def ro_w6(x, positions=None): return _rope(x, positions, two_i=False)
@A(E,'W','L from x.size(1)')
def ro_w7(x, positions=None):
    if positions is None: positions = torch.arange(x.size(1) if x.dim() > 2 else x.size(0))
    if positions.numel() != x.size(-2): positions = torch.arange(x.size(-2))[:positions.numel()].repeat(x.size(-2))[:x.size(-2)] * 0 + torch.arange(x.size(-2)) * 0
    return _rope(x, positions)
@A(E,'W','in place on x')
def ro_w8(x, positions=None):
    r = _rope(x, positions)
    with torch.no_grad(): x.copy_(r)
    return x
@A(E,'W','cos/sin cached by L')
def _mk3():
    C = {}
    def f(x, positions=None):
        L, D = x.shape[-2:]
        if positions is not None: return _rope(x, positions)
        if L not in C:
            ang = torch.arange(L, dtype=torch.float32)[:, None] * 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float32) / D)
            C[L] = (ang.cos(), ang.sin())
        c, s = C[L]; c, s = c.to(x.dtype), s.to(x.dtype)
        if c.shape[-1] != D // 2: c, s = c[..., :D // 2], s[..., :D // 2]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).flatten(-2)
    return f
ANS[-1] = (E, 'W', 'cos/sin cached by L only', _mk3())
generics(E, ro_r, ['f32', 'f64', 'idcache', 'buffer'])

# ---------------- 04 masks
E='padding_mask'
@A(E,'R','[:, None, None, :]')
def pm_r(token_ids, pad_id): return (token_ids != pad_id)[:, None, None, :]
@A(E,'R','ne + unsqueeze twice')
def pm_r2(token_ids, pad_id): return token_ids.ne(pad_id).unsqueeze(1).unsqueeze(1)
@A(E,'R','~eq + reshape')
def pm_r3(token_ids, pad_id): return ~(token_ids == pad_id).reshape(token_ids.size(0), 1, 1, token_ids.size(1))
@A(E,'W','== (True at pads)')
def pm_w1(token_ids, pad_id): return (token_ids == pad_id)[:, None, None, :]
@A(E,'W','(B, 1, L, 1)')
def pm_w2(token_ids, pad_id): return (token_ids != pad_id)[:, None, :, None]
@A(E,'W','(B, 1, L)')
def pm_w3(token_ids, pad_id): return (token_ids != pad_id)[:, None, :]
@A(E,'W','pad hard-coded 0')
def pm_w4(token_ids, pad_id): return (token_ids != 0)[:, None, None, :]
@A(E,'W','int mask')
def pm_w5(token_ids, pad_id): return (token_ids != pad_id)[:, None, None, :].long()
@A(E,'W','float additive mask')
def pm_w6(token_ids, pad_id): return torch.zeros(token_ids.shape).masked_fill(token_ids == pad_id, float('-inf'))[:, None, None, :]
@A(E,'W','view(B,1,1,L) on the ids, hard-coded B=3')
def pm_w7(token_ids, pad_id): return (token_ids != pad_id).view(3, 1, 1, -1)
generics(E, pm_r, ['idcache', 'shapecache', 'counter'])

E='causal_mask'
@A(E,'R','tril ones bool')
def cm_r(seq_len): return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))[None, None]
@A(E,'R','arange comparison')
def cm_r2(seq_len):
    i = torch.arange(seq_len); return (i[None, :] <= i[:, None]).view(1, 1, seq_len, seq_len)
@A(E,'R','~triu(diagonal=1)')
def cm_r3(seq_len): return ~torch.ones(1, 1, seq_len, seq_len, dtype=torch.bool).triu(1)
@A(E,'W','triu')
def cm_w1(seq_len): return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool))[None, None]
@A(E,'W','no diagonal')
def cm_w2(seq_len): return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=-1)[None, None]
@A(E,'W','float')
def cm_w3(seq_len): return torch.tril(torch.ones(seq_len, seq_len))[None, None]
@A(E,'W','(L, L)')
def cm_w4(seq_len): return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))
@A(E,'W','512x512 buffer sliced')
def _mk4():
    buf = torch.tril(torch.ones(512, 512, dtype=torch.bool))
    return lambda seq_len: buf[:seq_len, :seq_len][None, None]
ANS[-1] = (E, 'W', '512x512 buffer sliced', _mk4())
@A(E,'W','5000x5000 buffer sliced')
def _mk5():
    buf = torch.tril(torch.ones(5000, 5000, dtype=torch.bool))
    return lambda seq_len: buf[:seq_len, :seq_len][None, None]
ANS[-1] = (E, 'W', '5000x5000 buffer sliced (shared view)', _mk5())
@A(E,'W','True = blocked')
def cm_w6(seq_len): return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), 1)[None, None]
@A(E,'W','uint8 tril')
def cm_w7(seq_len): return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.uint8))[None, None]
generics(E, cm_r, ['idcache', 'shapecache', 'counter'])

E='target_mask'
@A(E,'R','padding & causal')
def tm_r(token_ids, pad_id):
    L = token_ids.size(1)
    return (token_ids != pad_id)[:, None, None, :] & torch.tril(torch.ones(L, L, dtype=torch.bool, device=token_ids.device))
@A(E,'R','logical_and with expand')
def tm_r2(token_ids, pad_id):
    B, L = token_ids.shape
    return torch.logical_and(token_ids.ne(pad_id).view(B, 1, 1, L).expand(B, 1, L, L), cm_r2(L))
@A(E,'W','padding on query axis')
def tm_w1(token_ids, pad_id):
    L = token_ids.size(1); return (token_ids != pad_id)[:, None, :, None] & cm_r(L)
@A(E,'W','or instead of and')
def tm_w2(token_ids, pad_id):
    L = token_ids.size(1); return pm_r(token_ids, pad_id) | cm_r(L)
@A(E,'W','(B, L, L)')
def tm_w3(token_ids, pad_id):
    return tm_r(token_ids, pad_id)[:, 0]
@A(E,'W','padding only')
def tm_w4(token_ids, pad_id): return pm_r(token_ids, pad_id).expand(-1, 1, token_ids.size(1), -1)
@A(E,'W','causal without diagonal')
def tm_w5(token_ids, pad_id): return pm_r(token_ids, pad_id) & cm_w2(token_ids.size(1))
@A(E,'W','query AND key padding (both axes)')
def tm_w6(token_ids, pad_id):
    m = token_ids != pad_id
    return m[:, None, None, :] & m[:, None, :, None] & cm_r(token_ids.size(1))
@A(E,'W','pad id 0 hard-coded')
def tm_w7(token_ids, pad_id): return tm_r(token_ids, 0)
generics(E, tm_r, ['idcache', 'shapecache'])

# ---------------- 05 attention
E='scaled_dot_product_attention'
def _att(q, k, v, mask=None, fill=float('-inf'), dim=-1, dk=None, scale=None, zero=True, anymask=False, inplace_w=False):
    d = q.size(-1) if dk is None else dk(q, k)
    s = q @ k.transpose(-2, -1) / (math.sqrt(d) if scale is None else scale(q, k))
    if mask is not None and (not anymask or (~mask).any()):
        s = s.masked_fill(~mask, fill(s) if callable(fill) else fill)
    w = torch.softmax(s, dim=dim)
    if mask is not None and zero:
        if inplace_w: w.masked_fill_(~mask.expand_as(w), 0.0)
        else: w = w.masked_fill(~mask, 0.0)
    return w @ v, w
@A(E,'R','masked_fill -inf, zero after')
def at_r(query, key, value, mask=None): return _att(query, key, value, mask)
@A(E,'R','einsum + where')
def at_r2(query, key, value, mask=None):
    s = torch.einsum('...qd,...kd->...qk', query, key) * query.shape[-1] ** -0.5
    if mask is not None: s = torch.where(mask, s, torch.tensor(float('-inf'), dtype=s.dtype))
    w = s.softmax(-1).nan_to_num(0.0)
    return torch.einsum('...qk,...kv->...qv', w, value), w
@A(E,'R','finfo(dtype).min fill then zero')
def at_r3(query, key, value, mask=None): return _att(query, key, value, mask, fill=lambda s: torch.finfo(s.dtype).min)
@A(E,'R','scale q first, matmul with mT')
def at_r4(query, key, value, mask=None):
    s = (query / math.sqrt(query.size(-1))) @ key.mT
    if mask is not None: s = s.masked_fill(mask.logical_not(), -math.inf)
    w = F.softmax(s, dim=-1)
    if mask is not None: w = w * mask
    return w @ value, w
@A(E,'W','finfo(float32).min fill')
def at_w1(query, key, value, mask=None): return _att(query, key, value, mask, fill=torch.finfo(torch.float32).min)
@A(E,'W','-1e4 fill, zero after')
def at_w2(query, key, value, mask=None): return _att(query, key, value, mask, fill=-1e4)
@A(E,'W','-1e9 fill, no zeroing')
def at_w3(query, key, value, mask=None): return _att(query, key, value, mask, fill=-1e9, zero=False)
@A(E,'W','softmax over queries')
def at_w4(query, key, value, mask=None): return _att(query, key, value, mask, dim=-2)
@A(E,'W','d_k from size(-2)')
def at_w5(query, key, value, mask=None): return _att(query, key, value, mask, dk=lambda q, k: q.size(-2))
@A(E,'W','view(-1, L, d)')
def at_w6(query, key, value, mask=None):
    sh = query.shape; q = query.view(-1, sh[-2], sh[-1]); k = key.view(-1, *key.shape[-2:]); v = value.view(-1, *value.shape[-2:])
    s = q @ k.transpose(1, 2) / math.sqrt(sh[-1])
    s = s.view(*sh[:-1], key.shape[-2])
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -1)
    if mask is not None: w = w.masked_fill(~mask, 0.0)
    return (w.reshape(-1, *w.shape[-2:]) @ v).view(*sh[:-1], value.shape[-1]), w
@A(E,'W','if mask.any() skip')
def at_w7(query, key, value, mask=None): return _att(query, key, value, mask, anymask=True)
@A(E,'W','in-place masked_fill_ on weights')
def at_w8(query, key, value, mask=None): return _att(query, key, value, mask, inplace_w=True)
@A(E,'W','no NaN fix (fully masked row)')
def at_w9(query, key, value, mask=None): return _att(query, key, value, mask, zero=False)
@A(E,'W','transpose(1, 2) for keys')
def at_w10(query, key, value, mask=None):
    s = query @ key.transpose(1, 2) / math.sqrt(query.size(-1)) if key.dim() == 3 else query @ key.transpose(1, 2).transpose(-2, -1).transpose(1, 2).transpose(-1, -2) / math.sqrt(query.size(-1))
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -1)
    if mask is not None: w = w.masked_fill(~mask, 0.0)
    return w @ value, w
@A(E,'W','divides by d_k')
def at_w11(query, key, value, mask=None): return _att(query, key, value, mask, scale=lambda q, k: q.size(-1))
@A(E,'W','fill 0 instead of -inf')
def at_w12(query, key, value, mask=None): return _att(query, key, value, mask, fill=0.0)
@A(E,'W','softmax in float32, weights float32')
def at_w13(query, key, value, mask=None):
    s = (query @ key.transpose(-2, -1)).float() / math.sqrt(query.size(-1))
    if mask is not None: s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -1)
    if mask is not None: w = w.masked_fill(~mask, 0.0)
    return (w @ value.float()).to(value.dtype), w
@A(E,'W','uses F.scaled_dot_product_attention')
def at_w14(query, key, value, mask=None):
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask), _att(query, key, value, mask)[1]
@A(E,'W','sqrt(d_model) from value size')
def at_w15(query, key, value, mask=None): return _att(query, key, value, mask, dk=lambda q, k: value.size(-1))
generics(E, at_r, ['f32', 'f64', 'idcache', 'buffer', 'mutate'])
