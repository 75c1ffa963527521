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

# ---------------------------------------------------------------- 03 embeddings
@A("embed", "R", "one-hot matmul, scale by D ** 0.5")
def em_r1(token_ids, table, scale=True):
    oh = F.one_hot(token_ids, table.size(0)).to(table.dtype)      # (B, L, V)
    out = oh @ table
    return out * table.size(1) ** 0.5 if scale else out

@A("embed", "R", "index_select on flat ids, divide by 1/sqrt(D)")
def em_r2(token_ids, table, scale=True):
    out = table.index_select(0, token_ids.reshape(-1)).reshape(*token_ids.shape, table.size(1))
    return out / (1 / math.sqrt(table.shape[-1])) if scale else out

@A("embed", "R", "gather rows in float32 then cast back")
def em_r3(token_ids, table, scale=True):
    t = table.float()
    out = torch.stack([t[i] for i in token_ids.reshape(-1).tolist()]).reshape(*token_ids.shape, -1) if token_ids.numel() else t[token_ids]
    if scale: out = out * math.sqrt(table.size(1))
    return out.to(table.dtype)

@A("embed", "W", "int(sqrt(D)) scale")
def em_w1(token_ids, table, scale=True):
    out = table[token_ids]
    return out * int(math.sqrt(table.size(1))) if scale else out

@A("embed", "W", "scale by sqrt(V)")
def em_w2(token_ids, table, scale=True):
    out = table[token_ids]
    return out * math.sqrt(table.size(0)) if scale else out

@A("embed", "W", "scales even when scale=False")
def em_w3(token_ids, table, scale=True): return table[token_ids] * math.sqrt(table.size(1))

@A("embed", "W", "scales the table in place")
def em_w4(token_ids, table, scale=True):
    if scale:
        with torch.no_grad(): table.mul_(math.sqrt(table.size(1)))
    return table[token_ids].clone()

@A("embed", "W", "divides by sqrt(D)")
def em_w5(token_ids, table, scale=True):
    out = table[token_ids]
    return out / math.sqrt(table.size(1)) if scale else out

@A("embed", "W", "returns float32 whatever the table dtype")
def em_w6(token_ids, table, scale=True): return em_r2(token_ids, table, scale).float()

@A("embed", "W", "scale computed in the table's dtype via torch.sqrt(tensor(D)) int -> error for ints")
def em_w7(token_ids, table, scale=True):
    out = table[token_ids]
    return out * torch.sqrt(torch.tensor(float(table.size(1)), dtype=torch.bfloat16)) if scale else out

def _pe64(max_len, d):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    ang = pos * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    return ang

@A("sinusoidal_positional_encoding", "R", "Annotated Transformer float32 exp(-log) form")
def pe_r1(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len).unsqueeze(1).float()
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe

@A("sinusoidal_positional_encoding", "R", "plain Python math loops")
def pe_r2(max_len, d_model):
    rows = []
    for pos in range(max_len):
        row = []
        for i in range(d_model // 2):
            a = pos * 10000 ** (-2 * i / d_model)
            row += [math.sin(a), math.cos(a)]
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32)

@A("sinusoidal_positional_encoding", "R", "stack(sin, cos).flatten in float64 then float32")
def pe_r3(max_len, d_model):
    ang = _pe64(max_len, d_model)
    return torch.stack((ang.sin(), ang.cos()), dim=-1).flatten(1).float()

@A("sinusoidal_positional_encoding", "R", "float32 angle pos / 10000 ** (2i/d) via torch.pow")
def pe_r4(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    denom = torch.pow(torch.tensor(10000.0), torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    ang = pos / denom
    return torch.stack((ang.sin(), ang.cos()), -1).reshape(max_len, d_model)

@A("sinusoidal_positional_encoding", "W", "sin and cos swapped")
def pe_w1(max_len, d_model):
    ang = _pe64(max_len, d_model)
    return torch.stack((ang.cos(), ang.sin()), dim=-1).flatten(1).float()

@A("sinusoidal_positional_encoding", "W", "exponent uses the column index j, not 2i")
def pe_w2(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    ang = pos * 10000.0 ** (-torch.arange(d_model, dtype=torch.float64) / d_model)
    pe = ang.clone(); pe[:, 0::2] = ang[:, 0::2].sin(); pe[:, 1::2] = ang[:, 1::2].cos()
    return pe.float()

@A("sinusoidal_positional_encoding", "W", "sin half then cos half (concatenated)")
def pe_w3(max_len, d_model):
    ang = _pe64(max_len, d_model)
    return torch.cat((ang.sin(), ang.cos()), dim=-1).float()

@A("sinusoidal_positional_encoding", "W", "positions start at 1")
def pe_w4(max_len, d_model):
    ang = _pe64(max_len + 1, d_model)[1:]
    return torch.stack((ang.sin(), ang.cos()), dim=-1).flatten(1).float()

@A("sinusoidal_positional_encoding", "W", "returns float64")
def pe_w5(max_len, d_model):
    ang = _pe64(max_len, d_model)
    return torch.stack((ang.sin(), ang.cos()), dim=-1).flatten(1)

@A("sinusoidal_positional_encoding", "W", "lru_cache returns the same tensor object")
@functools.lru_cache(maxsize=None)
def pe_w6(max_len, d_model): return pe_r3(max_len, d_model)

@A("sinusoidal_positional_encoding", "W", "angle in float16 (a half-precision habit)")
def pe_w7(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float16)[:, None]
    ang = (pos * 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model).half()).float()
    return torch.stack((ang.sin(), ang.cos()), dim=-1).flatten(1)

@A("sinusoidal_positional_encoding", "W", "base 1000")
def pe_w8(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    ang = pos * 1000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.stack((ang.sin(), ang.cos()), dim=-1).flatten(1).float()

@A("sinusoidal_positional_encoding", "W", "precomputed 512-row table sliced")
def pe_w9(max_len, d_model, _t={}):
    if d_model not in _t: _t[d_model] = pe_r3(512, d_model)
    return _t[d_model][:max_len].clone()

@A("add_positional_encoding", "R", "torch.add with narrow and unsqueeze")
def ap_r1(x, pe): return torch.add(x, pe.narrow(0, 0, x.size(-2)).unsqueeze(0))

@A("add_positional_encoding", "R", "loop over the batch and stack")
def ap_r2(x, pe): return torch.stack([x[b] + pe[:x.shape[1]] for b in range(x.shape[0])]) if x.shape[0] else x + pe[:x.shape[1]]

@A("add_positional_encoding", "R", "einsum with ones to broadcast pe over B")
def ap_r3(x, pe):
    sl = pe[: x.shape[1]]
    return x + sl.expand_as(x)

@A("add_positional_encoding", "W", "x += pe (in place)")
def ap_w1(x, pe):
    x += pe[: x.size(1)]
    return x

@A("add_positional_encoding", "W", "slices by the batch size")
def ap_w2(x, pe): return x + pe[: x.size(0)].unsqueeze(1)[:, :, :] if x.size(0) != x.size(1) else x + pe[: x.size(0)]

@A("add_positional_encoding", "W", "last L rows of pe")
def ap_w3(x, pe): return x + pe[pe.size(0) - x.size(1):]

@A("add_positional_encoding", "W", "adds pe scaled by sqrt(D) (mixes up with embed)")
def ap_w4(x, pe): return x + pe[: x.size(1)] * math.sqrt(x.size(-1))

@A("add_positional_encoding", "W", "result cast to float32")
def ap_w5(x, pe): return (x + pe[: x.size(1)]).float()

@A("add_positional_encoding", "W", "position of the first row reused for all (pe[0])")
def ap_w6(x, pe): return x + pe[0]

@A("add_positional_encoding", "W", "x.size(-2) wrongly taken as x.size(-1) for L")
def ap_w7(x, pe):
    L = x.size(1)
    return x + pe[:L] if L != x.size(-1) else x + pe[:x.size(-1)].T[:L]

def _rope_angle(L, D, positions, dtype=torch.float64):
    pos = torch.arange(L) if positions is None else positions
    return pos.to(dtype)[:, None] * 10000.0 ** (-torch.arange(0, D, 2, dtype=dtype) / D)   # (L, D/2)

@A("apply_rope", "R", "complex multiply in float64, cast back")
def ro_r1(x, positions=None):
    ang = _rope_angle(x.shape[-2], x.shape[-1], positions)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    out = torch.view_as_real(z * torch.polar(torch.ones_like(ang), ang)).flatten(-2)
    return out.to(x.dtype)

@A("apply_rope", "R", "2x2 rotation matrices with einsum in float32")
def ro_r2(x, positions=None):
    L, D = x.shape[-2:]
    ang = _rope_angle(L, D, positions)
    c, s = ang.cos(), ang.sin()
    R = torch.stack((torch.stack((c, -s), -1), torch.stack((s, c), -1)), -2)   # (L, D/2, 2, 2)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    pairs = x.to(work).unflatten(-1, (D // 2, 2))
    out = torch.einsum("lpij,...lpj->...lpi", R.to(work), pairs)
    return out.flatten(-2).to(x.dtype)

@A("apply_rope", "R", "even/odd slices written into a new tensor, cos/sin in x dtype")
def ro_r3(x, positions=None):
    ang = _rope_angle(x.shape[-2], x.shape[-1], positions)
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out

@A("apply_rope", "R", "LLaMA style: angles in float32 (float64 for float64 x)")
def ro_r4(x, positions=None):
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    ang = _rope_angle(x.shape[-2], x.shape[-1], positions, dtype=work)
    c, s = ang.cos(), ang.sin()
    xf = x.to(work)
    x0, x1 = xf[..., 0::2], xf[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).flatten(-2).to(x.dtype)

@A("apply_rope", "W", "angle computed in x's dtype (fp16 positions)")
def ro_w1(x, positions=None):
    ang = _rope_angle(x.shape[-2], x.shape[-1], positions, dtype=x.dtype)
    c, s = ang.cos(), ang.sin()
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).flatten(-2)

@A("apply_rope", "W", "rotates halves (i, i + D/2), GPT-NeoX style")
def ro_w2(x, positions=None):
    ang = _rope_angle(x.shape[-2], x.shape[-1], positions)
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x0, x1 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), -1)

@A("apply_rope", "W", "rotates the other way")
def ro_w3(x, positions=None):
    p = None if positions is None else positions
    ang = -_rope_angle(x.shape[-2], x.shape[-1], p)
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).flatten(-2)

@A("apply_rope", "W", "ignores positions")
def ro_w4(x, positions=None): return ro_r3(x, None)

@A("apply_rope", "W", "L taken from x.shape[1]")
def ro_w5(x, positions=None):
    L = x.shape[1] if x.dim() > 2 else x.shape[0]
    ang = _rope_angle(L, x.shape[-1], positions)
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).flatten(-2)

@A("apply_rope", "W", "writes the rotation into x in place")
def ro_w6(x, positions=None):
    ang = _rope_angle(x.shape[-2], x.shape[-1], positions)
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x0, x1 = x[..., 0::2].clone(), x[..., 1::2].clone()
    x[..., 0::2] = x0 * c - x1 * s
    x[..., 1::2] = x0 * s + x1 * c
    return x

@A("apply_rope", "W", "exponent -i/D instead of -2i/D")
def ro_w7(x, positions=None):
    L, D = x.shape[-2:]
    pos = torch.arange(L) if positions is None else positions
    ang = pos.double()[:, None] * 10000.0 ** (-torch.arange(D // 2, dtype=torch.float64) / D)
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).flatten(-2)

@A("apply_rope", "W", "cos/sin table cached by (L, D) ignoring positions")
def ro_w8(x, positions=None, _c={}):
    L, D = x.shape[-2:]
    if (L, D) not in _c: _c[(L, D)] = _rope_angle(L, D, positions)
    ang = _c[(L, D)]
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).flatten(-2)

# ---------------------------------------------------------------- 04 masks
@A("padding_mask", "R", "ne + two unsqueezes")
def pm_r1(token_ids, pad_id): return token_ids.ne(pad_id).unsqueeze(1).unsqueeze(1)

@A("padding_mask", "R", "torch.where to bool then view")
def pm_r2(token_ids, pad_id):
    m = torch.where(token_ids == pad_id, False, True)
    return m.view(m.shape[0], 1, 1, m.shape[1])

@A("padding_mask", "R", "logical_not of eq, reshape")
def pm_r3(token_ids, pad_id):
    B, L = token_ids.shape
    return torch.logical_not(torch.eq(token_ids, pad_id)).reshape(B, 1, 1, L)

@A("padding_mask", "W", "(B, 1, L, 1): queries instead of keys")
def pm_w1(token_ids, pad_id): return (token_ids != pad_id)[:, None, :, None]

@A("padding_mask", "W", "True on padding")
def pm_w2(token_ids, pad_id): return (token_ids == pad_id)[:, None, None, :]

@A("padding_mask", "W", "ids > pad_id")
def pm_w3(token_ids, pad_id): return (token_ids > pad_id)[:, None, None, :]

@A("padding_mask", "W", "ids.bool() (pad assumed 0)")
def pm_w4(token_ids, pad_id): return token_ids.bool()[:, None, None, :]

@A("padding_mask", "W", "float mask")
def pm_w5(token_ids, pad_id): return (token_ids != pad_id).float()[:, None, None, :]

@A("padding_mask", "W", "(B, 1, L) three axes")
def pm_w6(token_ids, pad_id): return (token_ids != pad_id)[:, None, :]

@A("padding_mask", "W", "transpose-reshape mixup: reshape(1, B, 1, L)")
def pm_w7(token_ids, pad_id):
    B, L = token_ids.shape
    return (token_ids != pad_id).reshape(1, B, 1, L).transpose(0, 1)[:, :, :, :] if B == 1 else (token_ids != pad_id).T.reshape(B, 1, 1, L)

@A("causal_mask", "R", "arange comparison")
def cm_r1(seq_len):
    i = torch.arange(seq_len)
    return (i[None, :] <= i[:, None])[None, None]

@A("causal_mask", "R", "not triu(diagonal=1)")
def cm_r2(seq_len):
    return ~torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1).view(1, 1, seq_len, seq_len)

@A("causal_mask", "R", "float ones tril then > 0.5")
def cm_r3(seq_len): return (torch.tril(torch.ones(1, 1, seq_len, seq_len)) > 0.5)

@A("causal_mask", "R", "cumsum of an identity")
def cm_r4(seq_len): return torch.eye(seq_len, dtype=torch.int64).flip(0).cumsum(0).flip(0).T.bool()[None, None] if False else torch.eye(seq_len, dtype=torch.int64).cumsum(0).bool()[None, None]

@A("causal_mask", "W", "triu: the future")
def cm_w1(seq_len): return torch.ones(seq_len, seq_len, dtype=torch.bool).triu()[None, None]

@A("causal_mask", "W", "tril(-1): no diagonal")
def cm_w2(seq_len): return torch.ones(seq_len, seq_len, dtype=torch.bool).tril(-1)[None, None]

@A("causal_mask", "W", "(L, L) without the two axes")
def cm_w3(seq_len): return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()

@A("causal_mask", "W", "512 x 512 buffer sliced")
def cm_w4(seq_len, _buf=torch.ones(512, 512, dtype=torch.bool).tril()):
    return _buf[:seq_len, :seq_len][None, None]

@A("causal_mask", "W", "lru_cache returns the same tensor")
@functools.lru_cache(maxsize=None)
def cm_w5(seq_len): return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()[None, None]

@A("causal_mask", "W", "uint8 mask")
def cm_w6(seq_len): return torch.ones(seq_len, seq_len, dtype=torch.uint8).tril()[None, None]

@A("causal_mask", "W", "expand of a buffer of its own grown on demand (view)")
def cm_w7(seq_len, _st={}):
    b = _st.get("b")
    if b is None or b.size(0) < seq_len: b = _st["b"] = torch.ones(2 * seq_len, 2 * seq_len, dtype=torch.bool).tril()
    return b[:seq_len, :seq_len][None, None]

def _tm_ref_free(token_ids, pad_id):
    L = token_ids.size(1)
    return pm_r1(token_ids, pad_id) & cm_r1(L)

@A("target_mask", "R", "my padding & my causal")
def tm_r1(token_ids, pad_id): return _tm_ref_free(token_ids, pad_id)

@A("target_mask", "R", "logical_and with explicit expand")
def tm_r2(token_ids, pad_id):
    B, L = token_ids.shape
    key_ok = (token_ids != pad_id)[:, None, None, :].expand(B, 1, L, L)
    past = torch.arange(L)[None, :] <= torch.arange(L)[:, None]
    return torch.logical_and(key_ok, past)

@A("target_mask", "R", "multiply int masks then bool")
def tm_r3(token_ids, pad_id):
    L = token_ids.size(1)
    return ((token_ids != pad_id).long()[:, None, None, :] * torch.ones(L, L, dtype=torch.long).tril()).bool()

@A("target_mask", "W", "padding on the query rows")
def tm_w1(token_ids, pad_id):
    return (token_ids != pad_id)[:, None, :, None] & cm_r1(token_ids.size(1))

@A("target_mask", "W", "OR instead of AND")
def tm_w2(token_ids, pad_id): return pm_r1(token_ids, pad_id) | cm_r1(token_ids.size(1))

@A("target_mask", "W", "pad rows and pad columns both hidden")
def tm_w3(token_ids, pad_id):
    k = token_ids != pad_id
    return k[:, None, None, :] & k[:, None, :, None] & cm_r1(token_ids.size(1))

@A("target_mask", "W", "(B, L, L) without the head axis")
def tm_w4(token_ids, pad_id): return _tm_ref_free(token_ids, pad_id)[:, 0]

@A("target_mask", "W", "causal part from the notebook's L = 8 padded/cut")
def tm_w5(token_ids, pad_id):
    L = token_ids.size(1)
    c = torch.zeros(L, L, dtype=torch.bool); n = min(L, 8)
    c[:n, :n] = torch.ones(n, n, dtype=torch.bool).tril()
    return pm_r1(token_ids, pad_id) & c

@A("target_mask", "W", "float result of mask multiply")
def tm_w6(token_ids, pad_id): return _tm_ref_free(token_ids, pad_id).float()

@A("target_mask", "W", "pad_id 0 assumed")
def tm_w7(token_ids, pad_id): return _tm_ref_free(token_ids, 0)
