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

# label corrected from R: a float64 table rounded to float32 loses digits (the text promises float64 inputs)
@A("embed", "W", "gather rows in float32 then cast back (float64 too)")
def em_r3(token_ids, table, scale=True):
    t = table.float()
    out = torch.stack([t[i] for i in token_ids.reshape(-1).tolist()]).reshape(*token_ids.shape, -1) if token_ids.numel() else t[token_ids]
    if scale: out = out * math.sqrt(table.size(1))
    return out.to(table.dtype)

@A("embed", "R", "rows gathered in float32 only for half dtypes, scale there, cast back")
def em_r4(token_ids, table, scale=True):
    work = table.float() if table.dtype in (torch.float16, torch.bfloat16) else table
    out = work[token_ids]
    return (out * math.sqrt(table.size(1)) if scale else out).to(table.dtype)

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

@A("add_positional_encoding", "W", "L read from the feature axis: pe[:x.size(-1)]")
def ap_w7(x, pe): return x + pe[: x.size(-1)]

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

# ---------------------------------------------------------------- 05 attention
def _softmax_hand(s, dim=-1):
    """exp(s - max) / sum, with an all -inf row giving zeros (no NaN)."""
    m = s.amax(dim, keepdim=True)
    m = torch.where(torch.isinf(m) & (m < 0), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    z = e.sum(dim, keepdim=True)
    return torch.where(z > 0, e / torch.where(z > 0, z, torch.ones_like(z)), torch.zeros_like(e))

@A("scaled_dot_product_attention", "R", "einsum + hand softmax, scores / sqrt after matmul")
def at_r1(query, key, value, mask=None):
    s = torch.einsum("...qd,...kd->...qk", query, key) / math.sqrt(query.shape[-1])
    if mask is not None: s = s.masked_fill(~mask, float("-inf"))
    w = _softmax_hand(s)
    return torch.einsum("...qk,...kv->...qv", w, value), w

@A("scaled_dot_product_attention", "R", "float32 inside for half dtypes, cast back")
def at_r2(query, key, value, mask=None):
    work = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
    q, k, v = query.to(work), key.to(work), value.to(work)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    if mask is not None: s = s.masked_fill(mask.logical_not(), -math.inf)
    w = torch.softmax(s, -1).nan_to_num(0.0)
    if mask is not None: w = w * mask
    return (w @ v).to(query.dtype), w.to(query.dtype)

@A("scaled_dot_product_attention", "W", "additive -inf mask, K scaled instead of Q (W since round 9: NaN gradient on a row with no visible key, now announced in 05)")
def at_r3(query, key, value, mask=None):
    s = query @ (key / math.sqrt(key.size(-1))).transpose(-2, -1)
    if mask is not None:
        add = torch.zeros(mask.shape, dtype=s.dtype).masked_fill(~mask, float("-inf"))
        s = s + add
    w = torch.softmax(s, dim=-1)
    w = torch.where(torch.isnan(w), torch.zeros_like(w), w)
    return w @ value, w

@A("scaled_dot_product_attention", "R", "float64 inside always, cast back")
def at_r4(query, key, value, mask=None):
    q, k, v = query.double(), key.double(), value.double()
    s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    if mask is not None: s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, -1)
    if mask is not None: w = w.masked_fill(~mask, 0.0)
    return (w @ v).to(query.dtype), w.to(query.dtype)

@A("scaled_dot_product_attention", "R", "loop over query rows with hand softmax")
def at_r5(query, key, value, mask=None):
    d = query.size(-1)
    ctx, ws = [], []
    for i in range(query.size(-2)):
        s = (query[..., i:i + 1, :] @ key.transpose(-2, -1)) / math.sqrt(d)
        if mask is not None:
            mrow = mask[..., i:i + 1, :] if mask.size(-2) > 1 else mask
            s = s.masked_fill(~mrow, float("-inf"))
        w = _softmax_hand(s)
        ws.append(w); ctx.append(w @ value)
    return torch.cat(ctx, -2), torch.cat(ws, -2)

def _att_core(query, key, value, mask, fill=float("-inf"), scale=None, dim=-1, zero=True):
    d = query.size(-1) if scale is None else scale
    s = query @ key.transpose(-2, -1) / math.sqrt(d)
    if mask is not None: s = s.masked_fill(~mask, fill)
    w = torch.softmax(s, dim=dim)
    if mask is not None and zero: w = w.masked_fill(~mask, 0.0)
    return w @ value, w

@A("scaled_dot_product_attention", "W", "scaled by sqrt(d_v)")
def at_w1(q, k, v, mask=None): return _att_core(q, k, v, mask, scale=v.size(-1))

@A("scaled_dot_product_attention", "W", "softmax over the query axis")
def at_w2(q, k, v, mask=None): return _att_core(q, k, v, mask, dim=-2)

@A("scaled_dot_product_attention", "W", "fill -1e9")
def at_w3(q, k, v, mask=None): return _att_core(q, k, v, mask, fill=-1e9)

@A("scaled_dot_product_attention", "W", "fill -1e4")
def at_w4(q, k, v, mask=None): return _att_core(q, k, v, mask, fill=-1e4)

@A("scaled_dot_product_attention", "W", "NaN on fully masked rows (no zeroing)")
def at_w5(q, k, v, mask=None): return _att_core(q, k, v, mask, zero=False)

@A("scaled_dot_product_attention", "W", "finfo(dtype).min fill, no zeroing: uniform weights on all-masked rows")
def at_w6(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None: s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, -1)
    return w @ v, w

@A("scaled_dot_product_attention", "W", "key.transpose(1, 2) (3-D habit)")
def at_w7(q, k, v, mask=None):
    s = q @ k.transpose(1, 2) / math.sqrt(q.size(-1))
    if mask is not None: s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, -1)
    if mask is not None: w = w.masked_fill(~mask, 0.0)
    return w @ v, w

@A("scaled_dot_product_attention", "W", "mask polarity inverted")
def at_w8(q, k, v, mask=None): return _att_core(q, k, v, None if mask is None else ~mask)

@A("scaled_dot_product_attention", "W", "hand softmax without max subtraction (overflow)")
def at_w9(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None: s = s.masked_fill(~mask, float("-inf"))
    e = s.exp(); z = e.sum(-1, keepdim=True)
    w = torch.where(z > 0, e / z, torch.zeros_like(e))
    return w @ v, w

@A("scaled_dot_product_attention", "W", "half inputs: scores and softmax in float32 but weights returned float32")
def at_w10(q, k, v, mask=None):
    c, w = at_r2(q, k, v, mask)
    qs, ks = q.float(), k.float()
    s = qs @ ks.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None: s = s.masked_fill(~mask, float("-inf"))
    ww = torch.softmax(s, -1).nan_to_num(0.0)
    return c, ww

@A("scaled_dot_product_attention", "W", "mask applied only to the weights after softmax (renormalised? no)")
def at_w11(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    w = torch.softmax(s, -1)
    if mask is not None: w = w * mask
    return w @ v, w

@A("scaled_dot_product_attention", "W", "mask applied after, then renormalised (hides -inf problems, NaN on empty rows)")
def at_w12(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    w = torch.softmax(s, -1)
    if mask is not None:
        w = w * mask
        w = w / w.sum(-1, keepdim=True).clamp_min(1e-12)
    return w @ v, w

@A("scaled_dot_product_attention", "W", "calls F.scaled_dot_product_attention for the context")
def at_w13(q, k, v, mask=None):
    _, w = at_r1(q, k, v, mask)
    return w @ v if False else F.scaled_dot_product_attention(q, k, v, attn_mask=mask).nan_to_num(0.0), w

@A("scaled_dot_product_attention", "W", "scores scaled in place on the caller's query")
def at_w14(q, k, v, mask=None):
    with torch.no_grad(): q.div_(math.sqrt(q.size(-1)))
    s = q @ k.transpose(-2, -1)
    if mask is not None: s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, -1)
    if mask is not None: w = w.masked_fill(~mask, 0.0)
    return w @ v, w

generics("scaled_dot_product_attention", at_r1, ["f32", "idcache", "counter"])   # W_buffer leaves tuples alone

# ---------------------------------------------------------------- 06 multihead
@A("linear", "R", "einsum")
def li_r1(x, weight, bias=None):
    y = torch.einsum("...i,oi->...o", x, weight)
    return y if bias is None else y + bias

@A("linear", "R", "matrix-vector via unsqueeze, float32 inside for halves")
def li_r2(x, weight, bias=None):
    work = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    y = (weight.to(work) @ x.to(work).unsqueeze(-1)).squeeze(-1)
    if bias is not None: y = y + bias.to(work)
    return y.to(x.dtype)

@A("linear", "R", "addmm on flattened rows, reshape back")
def li_r3(x, weight, bias=None):
    flat = x.reshape(-1, x.shape[-1])
    b = bias if bias is not None else torch.zeros(weight.shape[0], dtype=x.dtype)
    return torch.addmm(b, flat, weight.t()).reshape(*x.shape[:-1], weight.shape[0])

@A("linear", "R", "sum of products broadcast (no matmul) in float64, cast back")
def li_r4(x, weight, bias=None):
    y = (x.double().unsqueeze(-2) * weight.double()).sum(-1)
    if bias is not None: y = y + bias.double()
    return y.to(x.dtype)

@A("linear", "W", "x @ weight (no transpose)")
def li_w1(x, weight, bias=None):
    y = x @ weight
    return y if bias is None else y + bias

@A("linear", "W", "bias ignored")
def li_w2(x, weight, bias=None): return x @ weight.T

@A("linear", "W", "transposes the caller's weight in place")
def li_w3(x, weight, bias=None):
    y = x @ weight.t_()
    return y if bias is None else y + bias

@A("linear", "W", "W^T cached by id(weight)")
def li_w4(x, weight, bias=None, _c={}):
    if id(weight) not in _c: _c[id(weight)] = weight.T.clone()
    y = x @ _c[id(weight)]
    return y if bias is None else y + bias

@A("linear", "W", "2-D only: reshape(B, L, out) assumes 3-D x")
def li_w5(x, weight, bias=None):
    y = x.reshape(-1, x.shape[-1]) @ weight.T
    if bias is not None: y = y + bias
    return y.reshape(x.shape[0], -1, weight.shape[0]) if x.dim() == 3 else y.reshape(x.shape[0], weight.shape[0]) if x.dim() == 2 else y.reshape(x.shape[0], -1, weight.shape[0])

@A("linear", "W", "uses F.linear")
def li_w6(x, weight, bias=None): return F.linear(x, weight, bias)

@A("linear", "W", "bias added in place on the output of a view of x when weight is identity? (x @ W.T +=)")
def li_w7(x, weight, bias=None):
    y = x @ weight.T
    if bias is not None: bias.add_(0); y += bias
    return y.float() if x.dtype == torch.bfloat16 else y

generics("linear", li_r1, ["f64", "mutate", "idcache", "counter"])

@A("split_heads", "R", "stack of chunks")
def sh_r1(x, num_heads): return torch.stack(x.chunk(num_heads, dim=-1), dim=1)

@A("split_heads", "R", "unflatten + movedim")
def sh_r2(x, num_heads): return x.unflatten(-1, (num_heads, x.size(-1) // num_heads)).movedim(2, 1)

@A("split_heads", "R", "reshape + permute then contiguous")
def sh_r3(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, num_heads, D // num_heads).permute(0, 2, 1, 3).contiguous()

@A("split_heads", "W", "reshape straight to (B, H, L, d_k)")
def sh_w1(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, num_heads, L, D // num_heads)

# label corrected from W: view only splits the last axis, which works whatever its stride
@A("split_heads", "R", "view(B, L, H, d_k) then transpose")
def sh_w2(x, num_heads):
    B, L, D = x.shape
    return x.view(B, L, num_heads, D // num_heads).transpose(1, 2)

@A("split_heads", "W", "(d_k, H) order in the split")
def sh_w3(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, D // num_heads, num_heads).permute(0, 3, 1, 2)

@A("split_heads", "W", "no transpose: (B, L, H, d_k)")
def sh_w4(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, num_heads, D // num_heads)

@A("split_heads", "W", "chunks along L")
def sh_w5(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, num_heads, D // num_heads).transpose(1, 2) if L % num_heads else torch.stack(x.chunk(num_heads, dim=1), 1).reshape(B, num_heads, L, D // num_heads)

@A("split_heads", "W", "d_k = D // H hard-coded H = 4")
def sh_w6(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, 4, D // 4).transpose(1, 2)

@A("split_heads", "W", "transpose(2, 1) then reshape mix: permute(0, 2, 3, 1)")
def sh_w7(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, num_heads, D // num_heads).permute(0, 2, 1, 3).transpose(-1, -2).reshape(B, num_heads, L, D // num_heads)

generics("split_heads", sh_r2, ["f32", "mutate", "buffer"])

@A("merge_heads", "R", "cat of unbind")
def mh_r1(x): return torch.cat(x.unbind(1), dim=-1)

@A("merge_heads", "R", "transpose then flatten(2)")
def mh_r2(x): return x.transpose(1, 2).flatten(2)

@A("merge_heads", "R", "einsum with identity to permute, then reshape")
def mh_r3(x):
    B, H, L, d = x.shape
    return torch.einsum("bhld->blhd", x).reshape(B, L, H * d)

@A("merge_heads", "W", "reshape without transpose")
def mh_w1(x):
    B, H, L, d = x.shape
    return x.reshape(B, L, H * d)

@A("merge_heads", "W", "transpose(2, 3) instead of (1, 2)")
def mh_w2(x):
    B, H, L, d = x.shape
    return x.transpose(2, 3).reshape(B, L, H * d)

@A("merge_heads", "W", "view after transpose (crashes except trivial)")
def mh_w3(x):
    B, H, L, d = x.shape
    return x.transpose(1, 2).contiguous().view(B, L, H * d) if H == 1 or L == 1 else x.transpose(1, 2).view(B, L, H * d)

@A("merge_heads", "W", "cat along the last axis of the wrong heads order (reversed)")
def mh_w4(x): return torch.cat(x.unbind(1)[::-1], dim=-1)

@A("merge_heads", "W", "sum over heads")
def mh_w5(x): return x.sum(1).repeat(1, 1, x.size(1)) / 1.0

generics("merge_heads", mh_r2, ["f64", "mutate", "idcache", "counter"])

def _lin(x, w, b): y = x @ w.T; return y if b is None else y + b

@A("multi_head_attention", "R", "per-head loop over weight slices")
def mha_r1(query, key, value, params, num_heads, mask=None):
    D = query.size(-1); dk = D // num_heads
    outs, ws = [], []
    for h in range(num_heads):
        sl = slice(h * dk, (h + 1) * dk)
        bq, bk, bv = (params.get(n) for n in ("b_q", "b_k", "b_v"))
        q = _lin(query, params["w_q"][sl], None if bq is None else bq[sl])
        k = _lin(key, params["w_k"][sl], None if bk is None else bk[sl])
        v = _lin(value, params["w_v"][sl], None if bv is None else bv[sl])
        m = None
        if mask is not None:
            m = mask[:, h] if mask.dim() == 4 and mask.size(1) > 1 else (mask[:, 0] if mask.dim() == 4 else mask)
        c, w = at_r1(q, k, v, m)
        outs.append(c); ws.append(w)
    out = _lin(torch.cat(outs, -1), params["w_o"], params.get("b_o"))
    return out, torch.stack(ws, 1)

@A("multi_head_attention", "R", "own linear/split/merge + own attention, float32 inside for halves")
def mha_r2(query, key, value, params, num_heads, mask=None):
    dt = query.dtype
    work = torch.float32 if dt in (torch.float16, torch.bfloat16) else dt
    P = {k: (None if v is None else v.to(work)) for k, v in params.items()}
    q = sh_r2(li_r1(query.to(work), P["w_q"], P.get("b_q")), num_heads)
    k = sh_r2(li_r1(key.to(work), P["w_k"], P.get("b_k")), num_heads)
    v = sh_r2(li_r1(value.to(work), P["w_v"], P.get("b_v")), num_heads)
    c, w = at_r1(q, k, v, mask)
    return li_r1(mh_r2(c), P["w_o"], P.get("b_o")).to(dt), w.to(dt)

@A("multi_head_attention", "W", "stacked w_qkv projection via einsum with heads axis (W since round 9: its attention adds a -inf mask, NaN gradient on a row with no visible key)")
def mha_r3(query, key, value, params, num_heads, mask=None):
    D = query.size(-1); H = num_heads; dk = D // H
    def proj(x, n):
        w = params[f"w_{n}"].reshape(H, dk, D)
        y = torch.einsum("bld,hkd->bhlk", x, w)
        b = params.get(f"b_{n}")
        return y if b is None else y + b.reshape(1, H, 1, dk)
    q, k, v = proj(query, "q"), proj(key, "k"), proj(value, "v")
    c, w = at_r3(q, k, v, mask)
    out = torch.einsum("bhlk,ohk->blo", c, params["w_o"].reshape(D, H, dk))
    bo = params.get("b_o")
    return (out if bo is None else out + bo), w

def _mha(query, key, value, params, H, mask=None, *, no_out=False, split=sh_r2, scale_D=False, self_kv=False, avg=False, nomerge=False):
    q = split(_lin(query, params["w_q"], params.get("b_q")), H)
    kin = query if self_kv else key; vin = query if self_kv else value
    k = split(_lin(kin, params["w_k"], params.get("b_k")), H)
    v = split(_lin(vin, params["w_v"], params.get("b_v")), H)
    if scale_D: q = q * math.sqrt(q.size(-1)) / math.sqrt(query.size(-1))
    c, w = at_r1(q, k, v, mask)
    m = mh_r1(c) if nomerge else mh_r2(c)
    out = m if no_out else _lin(m, params["w_o"], params.get("b_o"))
    return out, (w.mean(1) if avg else w)

@A("multi_head_attention", "W", "no output projection")
def mha_w1(q, k, v, p, H, mask=None): return _mha(q, k, v, p, H, mask, no_out=True)

@A("multi_head_attention", "W", "heads split by a straight reshape")
def mha_w2(q, k, v, p, H, mask=None): return _mha(q, k, v, p, H, mask, split=sh_w1)

@A("multi_head_attention", "W", "scaled by sqrt(D) instead of sqrt(d_k)")
def mha_w3(q, k, v, p, H, mask=None): return _mha(q, k, v, p, H, mask, scale_D=True)

@A("multi_head_attention", "W", "keys and values projected from the query (self-attention only)")
def mha_w4(q, k, v, p, H, mask=None): return _mha(q, k, v, p, H, mask, self_kv=True)

@A("multi_head_attention", "W", "weights averaged over heads")
def mha_w5(q, k, v, p, H, mask=None): return _mha(q, k, v, p, H, mask, avg=True)

@A("multi_head_attention", "W", "mask unsqueezed once more for the head axis")
def mha_w6(q, k, v, p, H, mask=None): return _mha(q, k, v, p, H, None if mask is None else mask.unsqueeze(1))

@A("multi_head_attention", "W", "w_k used for the values too")
def mha_w7(q, k, v, p, H, mask=None):
    p2 = dict(p); p2["w_v"] = p["w_k"]; p2["b_v"] = p.get("b_k")
    return _mha(q, k, v, p2, H, mask)

@A("multi_head_attention", "W", "output bias dropped")
def mha_w8(q, k, v, p, H, mask=None):
    p2 = dict(p); p2["b_o"] = None
    return _mha(q, k, v, p2, H, mask)

@A("multi_head_attention", "W", "uses nn.MultiheadAttention's functional form")
def mha_w9(q, k, v, p, H, mask=None):
    D = q.size(-1)
    am = None if mask is None else ~mask.expand(q.size(0), H, q.size(1), k.size(1)).reshape(-1, q.size(1), k.size(1))
    out, w = F.multi_head_attention_forward(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), D, H, None,
        torch.cat([p["b_q"], p["b_k"], p["b_v"]]), None, None, False, 0.0, p["w_o"], p["b_o"], training=False,
        attn_mask=am, need_weights=True, average_attn_weights=False, use_separate_proj_weight=True,
        q_proj_weight=p["w_q"], k_proj_weight=p["w_k"], v_proj_weight=p["w_v"])
    return out.transpose(0, 1), w

generics("multi_head_attention", mha_r2, ["f32", "mutate", "counter"])

# ---------------------------------------------------------------- 07 sublayers
@A("feed_forward", "R", "einsum and clamp(min=0)")
def ff_r1(x, params):
    h = torch.einsum("bld,fd->blf", x, params["w_1"]) + params["b_1"]
    return torch.einsum("blf,df->bld", h.clamp(min=0), params["w_2"]) + params["b_2"]

@A("feed_forward", "R", "my linear twice with maximum(h, 0), float32 inside for halves")
def ff_r2(x, params):
    work = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    P = {k: v.to(work) for k, v in params.items()}
    h = li_r1(x.to(work), P["w_1"], P["b_1"])
    h = torch.maximum(h, torch.zeros((), dtype=work))
    return li_r1(h, P["w_2"], P["b_2"]).to(x.dtype)

# label corrected from R: at a hidden unit of -inf (float16 overflow, the check's case 4) -inf * 0 = NaN, ReLU gives 0
@A("feed_forward", "W", "h * (h > 0) and addmm rows")
def ff_r3(x, params):
    h = li_r3(x, params["w_1"], params["b_1"])
    h = h * (h > 0)
    return li_r3(h, params["w_2"], params["b_2"])

def _ff(x, p, act=torch.relu, b2=True, relu_out=False):
    h = act(x @ p["w_1"].T + p["b_1"])
    y = h @ p["w_2"].T + (p["b_2"] if b2 else 0)
    return torch.relu(y) if relu_out else y

@A("feed_forward", "W", "GELU instead of ReLU")
def ff_w1(x, p): return _ff(x, p, act=F.gelu)

@A("feed_forward", "W", "ReLU after the second layer too")
def ff_w2(x, p): return _ff(x, p, relu_out=True)

@A("feed_forward", "W", "b_2 forgotten")
def ff_w3(x, p): return _ff(x, p, b2=False)

@A("feed_forward", "W", "leaky ReLU")
def ff_w4(x, p): return _ff(x, p, act=lambda h: F.leaky_relu(h, 0.01))

@A("feed_forward", "W", "ReLU on the input before the first layer")
def ff_w5(x, p): return torch.relu(x) @ p["w_1"].T @ p["w_2"].T + p["b_1"] @ p["w_2"].T + p["b_2"] if False else (torch.relu(x) @ p["w_1"].T + p["b_1"]) @ p["w_2"].T + p["b_2"]

@A("feed_forward", "W", "relu_ in place on x's first projection when x is the hidden (mutates x via alias when w_1 is identity?) -> x.relu_()")
def ff_w6(x, p):
    out = _ff(x, p)
    with torch.no_grad(): x.relu_()
    return out

@A("feed_forward", "W", "clamp(max=0) (sign slip)")
def ff_w7(x, p): return _ff(x, p, act=lambda h: h.clamp(max=0))

generics("feed_forward", ff_r1, ["f32", "idcache", "buffer"])

@A("dropout", "R", "where(rand < p, 0, x / (1 - p)), clone when not training")
def dr_r1(x, p, training=True):
    if not training: return x.clone()
    r = torch.rand(x.shape)
    return torch.where(r < p, torch.zeros((), dtype=x.dtype), x / (1 - p))

@A("dropout", "R", "bernoulli keep mask in float32, times 1/(1-p)")
def dr_r2(x, p, training=True):
    if not training or p == 0: return x
    keep = torch.bernoulli(torch.full(x.shape, 1 - p, dtype=torch.float32))
    return x * keep.to(x.dtype) * (1.0 / (1 - p))

@A("dropout", "R", "strict > p comparison, division in float32 for halves")
def dr_r3(x, p, training=True):
    if not training: return x
    keep = torch.rand(x.shape, dtype=torch.float32) > p
    work = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    return (x.to(work) * keep / (1 - p)).to(x.dtype)

@A("dropout", "W", "no rescaling of survivors")
def dr_w1(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape) >= p)

@A("dropout", "W", "multiplies by (1 - p)")
def dr_w2(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape) >= p) * (1 - p)

@A("dropout", "W", "keep with probability p (rand < p kept)")
def dr_w3(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape) < p) / (1 - p)

@A("dropout", "W", "one mask per column shared by all rows")
def dr_w4(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape[-1]) >= p) / (1 - p)

@A("dropout", "W", "manual_seed(0) inside: same mask every call")
def dr_w5(x, p, training=True):
    if not training: return x
    g = torch.Generator().manual_seed(0)
    return x * (torch.rand(x.shape, generator=g) >= p) / (1 - p)

@A("dropout", "W", "training flag ignored")
def dr_w6(x, p, training=True): return x * (torch.rand(x.shape) >= p) / (1 - p)

@A("dropout", "W", "mask drawn in x's dtype")
def dr_w7(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape, dtype=x.dtype) >= p) / (1 - p)

@A("dropout", "W", "exactly round(p * n) entries dropped (randperm)")
def dr_w8(x, p, training=True):
    if not training: return x
    n = x.numel(); k = round(p * n)
    keep = torch.ones(n, dtype=torch.bool); keep[torch.randperm(n)[:k]] = False
    return x * keep.view(x.shape) / (1 - p)

@A("dropout", "W", "in place: x.mul_(mask)")
def dr_w9(x, p, training=True):
    if not training: return x
    with torch.no_grad(): x.mul_((torch.rand(x.shape) >= p)).div_(1 - p)
    return x

@A("dropout", "W", "two draws: second call to rand decides scale (dropped entries kept scaled)")
def dr_w10(x, p, training=True):
    if not training: return x
    drop = torch.rand(x.shape) < p
    again = torch.rand(x.shape) < p
    return torch.where(drop & again, torch.zeros_like(x), x / (1 - p))

@A("dropout", "W", "mask cached per shape (same mask each call)")
def dr_w11(x, p, training=True, _c={}):
    if not training: return x
    key = (tuple(x.shape), p)
    if key not in _c: _c[key] = torch.rand(x.shape) >= p
    return x * _c[key] / (1 - p)

def _ln32(x, gamma, beta, eps=1e-5):
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(work)
    mu = xf.sum(-1, keepdim=True) / xf.size(-1)
    c = xf - mu
    var = (c * c).sum(-1, keepdim=True) / xf.size(-1)
    return (c / torch.sqrt(var + eps) * gamma.to(work) + beta.to(work)).to(x.dtype)

@A("layer_norm", "R", "two-pass sums in float32 (float64 for float64), cast back")
def ln_r1(x, gamma, beta, eps=1e-5): return _ln32(x, gamma, beta, eps)

@A("layer_norm", "R", "var_mean + rsqrt")
def ln_r2(x, gamma, beta, eps=1e-5):
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return (x - mean) * torch.rsqrt(var + eps) * gamma + beta

@A("layer_norm", "R", "E[x^2] - E[x]^2 in float64, cast back")
def ln_r3(x, gamma, beta, eps=1e-5):
    xd = x.double()
    m = xd.mean(-1, keepdim=True)
    v = (xd * xd).mean(-1, keepdim=True) - m * m
    return ((xd - m) / (v + eps).sqrt() * gamma.double() + beta.double()).to(x.dtype)

@A("layer_norm", "R", "einsum-based mean/var with ones vector, float32 inside")
def ln_r4(x, gamma, beta, eps=1e-5):
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(work); D = xf.size(-1)
    ones = torch.full((D,), 1.0 / D, dtype=work)
    mu = torch.einsum("...d,d->...", xf, ones)[..., None]
    var = torch.einsum("...d,d->...", (xf - mu) ** 2, ones)[..., None]
    y = (xf - mu) / (var + eps) ** 0.5
    return (y * gamma.to(work) + beta.to(work)).to(x.dtype)

def _ln(x, g, b, eps=1e-5, unbiased=False, outside=False, dim=-1):
    m = x.mean(dim, keepdim=True)
    v = x.var(dim, keepdim=True, unbiased=unbiased)
    den = v.sqrt() + eps if outside else (v + eps).sqrt()
    return (x - m) / den * g + b

@A("layer_norm", "W", "unbiased variance")
def ln_w1(x, g, b, eps=1e-5): return _ln(x, g, b, eps, unbiased=True)

@A("layer_norm", "W", "eps outside the root")
def ln_w2(x, g, b, eps=1e-5): return _ln(x, g, b, eps, outside=True)

@A("layer_norm", "W", "Annotated Transformer std + eps")
def ln_w3(x, g, b, eps=1e-6): return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps) * g + b

@A("layer_norm", "W", "squares in float16 (overflow)")
def ln_w4(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdim=True)
    v = ((x - m) ** 2).mean(-1, keepdim=True)
    return (x - m) / torch.sqrt(v + eps) * g + b

@A("layer_norm", "W", "normalises over axis -2")
def ln_w5(x, g, b, eps=1e-5): return _ln(x, g, b, eps, dim=-2) if x.dim() > 1 else _ln(x, g, b, eps)

@A("layer_norm", "W", "gamma and beta swapped")
def ln_w6(x, g, b, eps=1e-5): return _ln(x, b, g, eps)

@A("layer_norm", "W", "default eps 1e-6")
def ln_w7(x, g, b, eps=1e-6): return _ln(x, g, b, eps)

@A("layer_norm", "W", "x -= mean in place")
def ln_w8(x, g, b, eps=1e-5):
    v = x.var(-1, keepdim=True, unbiased=False)
    with torch.no_grad(): x -= x.mean(-1, keepdim=True)
    return x / torch.sqrt(v + eps) * g + b

@A("layer_norm", "W", "uses F.layer_norm")
def ln_w9(x, g, b, eps=1e-5): return F.layer_norm(x, (x.size(-1),), g, b, eps)

@A("layer_norm", "W", "eps added to the std squared twice: sqrt(var + eps) + eps")
def ln_w10(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdim=True); v = x.var(-1, keepdim=True, unbiased=False)
    return (x - m) / (torch.sqrt(v + eps) + eps) * g + b

@A("layer_norm", "W", "statistics of the whole tensor (mean/var over all axes)")
def ln_w11(x, g, b, eps=1e-5):
    return (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps) * g + b

generics("layer_norm", ln_r2, ["f32", "idcache", "buffer", "counter"])

@A("residual_sublayer", "R", "my float32 layer norm, both designs")
def rs_r1(x, sublayer, norm, norm_first=False):
    if norm_first: return x + sublayer(_ln32(x, norm["gamma"], norm["beta"]))
    return _ln32(x + sublayer(x), norm["gamma"], norm["beta"])

@A("residual_sublayer", "R", "tfmlib-free var_mean LN, torch.add")
def rs_r2(x, sublayer, norm, norm_first=False):
    ln = lambda t: ln_r2(t, norm["gamma"], norm["beta"])
    return torch.add(x, sublayer(ln(x))) if norm_first else ln(torch.add(x, sublayer(x)))

@A("residual_sublayer", "R", "explicit if/else with the einsum LN")
def rs_r3(x, sublayer, norm, norm_first=False):
    g, b = norm["gamma"], norm["beta"]
    if not norm_first:
        y = sublayer(x)
        return ln_r4(y + x, g, b)
    h = ln_r4(x, g, b)
    return h.new_zeros(()) + x + sublayer(h)

@A("residual_sublayer", "W", "post-LN as x + LN(sublayer(x))")
def rs_w1(x, sub, norm, norm_first=False):
    ln = lambda t: ln_r2(t, norm["gamma"], norm["beta"])
    return x + sub(ln(x)) if norm_first else x + ln(sub(x))

@A("residual_sublayer", "W", "pre-LN adds LN(x) instead of x")
def rs_w2(x, sub, norm, norm_first=False):
    ln = lambda t: ln_r2(t, norm["gamma"], norm["beta"])
    if norm_first: h = ln(x); return h + sub(h)
    return ln(x + sub(x))

@A("residual_sublayer", "W", "calls the sublayer twice")
def rs_w3(x, sub, norm, norm_first=False):
    ln = lambda t: ln_r2(t, norm["gamma"], norm["beta"])
    if norm_first: sub(ln(x)); return x + sub(ln(x))
    sub(x); return ln(x + sub(x))

@A("residual_sublayer", "W", "sublayer applied per sample")
def rs_w4(x, sub, norm, norm_first=False):
    ln = lambda t: ln_r2(t, norm["gamma"], norm["beta"])
    per = lambda t: torch.cat([sub(t[i:i + 1]) for i in range(t.size(0))])
    return x + per(ln(x)) if norm_first else ln(x + per(x))

@A("residual_sublayer", "W", "sublayer applied per token")
def rs_w5(x, sub, norm, norm_first=False):
    ln = lambda t: ln_r2(t, norm["gamma"], norm["beta"])
    per = lambda t: torch.cat([sub(t[:, j:j + 1]) for j in range(t.size(1))], 1)
    return x + per(ln(x)) if norm_first else ln(x + per(x))

@A("residual_sublayer", "W", "norm_first ignored (always post-LN)")
def rs_w6(x, sub, norm, norm_first=False):
    return ln_r2(x + sub(x), norm["gamma"], norm["beta"])

@A("residual_sublayer", "W", "pre-LN with a final LN too")
def rs_w7(x, sub, norm, norm_first=False):
    ln = lambda t: ln_r2(t, norm["gamma"], norm["beta"])
    return ln(x + sub(ln(x))) if norm_first else ln(x + sub(x))

@A("residual_sublayer", "W", "x += sublayer(x) in place")
def rs_w8(x, sub, norm, norm_first=False):
    ln = lambda t: ln_r2(t, norm["gamma"], norm["beta"])
    with torch.no_grad():
        if norm_first: x += sub(ln(x)); return x
        x += sub(x); return ln(x)

@A("residual_sublayer", "W", "LN with unbiased variance inside")
def rs_w9(x, sub, norm, norm_first=False):
    ln = lambda t: ln_w1(t, norm["gamma"], norm["beta"])
    return x + sub(ln(x)) if norm_first else ln(x + sub(x))

@A("residual_sublayer", "W", "pre-LN: sublayer of x, LN of the sum's update")
def rs_w10(x, sub, norm, norm_first=False):
    ln = lambda t: ln_r2(t, norm["gamma"], norm["beta"])
    return x + ln(sub(x)) if norm_first else ln(x + sub(x))

# ---------------------------------------------------------------- batch 2: more styles and mistakes
@A("broadcast_shape", "R", "returns torch.Size (a tuple subclass)")
def bs_r4(a, b): return torch.Size(bs_r1(a, b))

@A("broadcast_shape", "W", "accepts a clash when either size is 0")
def bs_w12(a, b):
    out = []
    for x, y in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if x != y and 1 not in (x, y) and 0 not in (x, y): raise ValueError(f"sizes {x} and {y} clash")
        out.append(min(x, y) if 0 in (x, y) else (y if x == 1 else x))
    return tuple(reversed(out))

@A("decode", "W", "stops at vocab.get('<eos>', 2): id 2 in a vocab without <eos>")
def de_w9(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    eos = vocab.get("<eos>", 2)
    out = []
    for i in (ids.tolist() if torch.is_tensor(ids) else ids):
        if skip_specials and i == eos: break
        t = inv[i]
        if skip_specials and t in SP: continue
        out.append(t)
    return " ".join(out)

@A("decode", "W", "specials = the first four ids of the vocab")
def de_w10(ids, vocab, skip_specials=True):
    inv = {i: t for t, i in vocab.items()}
    out = []
    for i in (ids.tolist() if torch.is_tensor(ids) else ids):
        t = inv[i]
        if skip_specials and t == "<eos>": break
        if skip_specials and i < 4: continue
        out.append(t)
    return " ".join(out)

@A("decode", "R", "numpy array of ids, vectorised eos search")
def de_r4(ids, vocab, skip_specials=True):
    arr = np.asarray(ids.tolist() if torch.is_tensor(ids) else [int(i) for i in ids], dtype=np.int64)
    inv = {i: t for t, i in vocab.items()}
    if skip_specials and "<eos>" in vocab:
        hit = np.nonzero(arr == vocab["<eos>"])[0]
        if hit.size: arr = arr[: hit[0]]
    toks = [inv[int(i)] for i in arr]
    return " ".join(t for t in toks if not (skip_specials and t in SP))

@A("encode", "W", "typed special tokens escaped to <unk>")
def en_w9(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab["<unk>"] if w in SP else vocab.get(w, vocab["<unk>"]) for w in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])

@A("build_vocab", "W", "words numbered from 4 whatever the number of specials")
def bv_w9(sentences, specials=SP):
    v = {t: i for i, t in enumerate(specials)}
    n = 4
    for s in sentences:
        for t in s.split():
            if t not in v: v[t] = n; n += 1
    return v

@A("pad_batch", "R", "torch.full with an int fill (dtype inferred long)")
def pb_r4(id_lists, pad_id, max_len=None):
    if not id_lists: raise ValueError("id_lists: empty batch")
    L = max_len if max_len is not None else max(len(r) for r in id_lists)
    out = torch.full((len(id_lists), L), int(pad_id))
    for b, r in enumerate(id_lists):
        r = [int(i) for i in r][:L]
        if r: out[b, :len(r)] = torch.tensor(r)
    return out

@A("pad_batch", "W", "r + [pad] * n (tuples and arrays break, fine for lists) but int32 via numpy")
def pb_w9(id_lists, pad_id, max_len=None):
    L = max_len if max_len is not None else max(len(r) for r in id_lists)
    arr = np.full((len(id_lists), L), pad_id, dtype=np.int32)
    for b, r in enumerate(id_lists): arr[b, :min(len(r), L)] = list(r)[:L]
    return torch.from_numpy(arr)

@A("embed", "R", "F.embedding (torch, not tfmlib) then scale")
def em_r5(token_ids, table, scale=True):
    out = F.embedding(token_ids, table)
    return out * math.sqrt(table.size(-1)) if scale else out

@A("embed", "W", "view(L, B, D) after flat lookup")
def em_w8(token_ids, table, scale=True):
    B, L = token_ids.shape
    out = table[token_ids.reshape(-1)].view(L, B, -1).transpose(0, 1) if B != L else table[token_ids.T.reshape(-1)].view(L, B, -1)
    return out * math.sqrt(table.size(1)) if scale else out

@A("sinusoidal_positional_encoding", "W", "integer division in the exponent: 2 * i // d_model")
def pe_w10(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for i in range(d_model // 2):
        div = 10000 ** (2 * i // d_model)
        pos = torch.arange(max_len, dtype=torch.float64)
        pe[:, 2 * i] = torch.sin(pos / div).float(); pe[:, 2 * i + 1] = torch.cos(pos / div).float()
    return pe

@A("apply_rope", "W", "positions counted from 1 when None")
def ro_w9(x, positions=None):
    return ro_r3(x, torch.arange(1, x.shape[-2] + 1) if positions is None else positions)

@A("apply_rope", "W", "view_as_complex on x without contiguous (crash on transposed views)")
def ro_w10(x, positions=None):
    ang = _rope_angle(x.shape[-2], x.shape[-1], positions)
    z = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))
    return torch.view_as_real(z * torch.polar(torch.ones_like(ang), ang).to(torch.complex64)).flatten(-2).to(x.dtype)

@A("padding_mask", "R", "compare after unsqueeze")
def pm_r4(token_ids, pad_id): return token_ids.unsqueeze(1).unsqueeze(2) != pad_id

@A("causal_mask", "W", "off by one: tril of an (L+1) square cut from the bottom-right")
def cm_w8(seq_len): return torch.ones(seq_len + 1, seq_len + 1, dtype=torch.bool).tril()[1:, 1:][None, None] if False else torch.ones(seq_len + 1, seq_len + 1, dtype=torch.bool).tril()[1:, :-1][None, None]

@A("target_mask", "R", "bool * bool")
def tm_r4(token_ids, pad_id):
    L = token_ids.size(1)
    return pm_r4(token_ids, pad_id) * torch.ones(L, L, dtype=torch.bool).tril()

@A("scaled_dot_product_attention", "R", "exp(log_softmax), masked scores via masked_fill")
def at_r6(query, key, value, mask=None):
    s = query @ key.mT * query.size(-1) ** -0.5
    if mask is not None: s = s.masked_fill(~mask, float("-inf"))
    w = torch.log_softmax(s, -1).exp()
    if mask is not None: w = torch.where(mask, w, torch.zeros((), dtype=w.dtype))
    return w @ value, w

@A("scaled_dot_product_attention", "W", "scale by sqrt(Lk)")
def at_w15(q, k, v, mask=None): return _att_core(q, k, v, mask, scale=k.size(-2))

@A("scaled_dot_product_attention", "W", "weights zeroed but context from unzeroed NaN->0 uniform (finfo.min fill, weights zeroed after @)")
def at_w16(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None: s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, -1)
    ctx = w @ v
    if mask is not None: w = w.masked_fill(~mask, 0.0)
    return ctx, w

@A("linear", "W", "`if bias:` (ambiguous truth value for out > 1)")
def li_w8(x, weight, bias=None):
    y = x @ weight.T
    if bias: y = y + bias
    return y

@A("multi_head_attention", "W", "heads and d_k confused: split into D // H heads")
def mha_w10(q, k, v, p, H, mask=None):
    D = q.size(-1)
    return _mha(q, k, v, p, D // H, mask)

@A("multi_head_attention", "W", "mask only for the first head")
def mha_w11(query, key, value, params, num_heads, mask=None):
    q = sh_r2(_lin(query, params["w_q"], params.get("b_q")), num_heads)
    k = sh_r2(_lin(key, params["w_k"], params.get("b_k")), num_heads)
    v = sh_r2(_lin(value, params["w_v"], params.get("b_v")), num_heads)
    if mask is None: c, w = at_r1(q, k, v)
    else:
        c0, w0 = at_r1(q[:, :1], k[:, :1], v[:, :1], mask)
        c1, w1 = at_r1(q[:, 1:], k[:, 1:], v[:, 1:])
        c, w = torch.cat([c0, c1], 1), torch.cat([w0, w1], 1)
    return _lin(mh_r2(c), params["w_o"], params.get("b_o")), w

@A("multi_head_attention", "R", "einsum projections but own attention at_r1 (not the additive-mask one)")
def mha_r4(query, key, value, params, num_heads, mask=None):
    D = query.size(-1); H = num_heads; dk = D // H
    def proj(x, n):
        y = torch.einsum("bld,hkd->bhlk", x, params[f"w_{n}"].reshape(H, dk, D))
        b = params.get(f"b_{n}")
        return y if b is None else y + b.reshape(1, H, 1, dk)
    c, w = at_r1(proj(query, "q"), proj(key, "k"), proj(value, "v"), mask)
    out = torch.einsum("bhlk,ohk->blo", c, params["w_o"].reshape(D, H, dk))
    bo = params.get("b_o")
    return (out if bo is None else out + bo), w

@A("dropout", "R", "module-level generator seeded once (a new mask each call)")
def dr_r4(x, p, training=True, _g=torch.Generator().manual_seed(1234)):
    if not training or p == 0: return x
    return x * (torch.rand(x.shape, generator=_g) >= p) / (1 - p)

@A("dropout", "W", "eval mode returns x * (1 - p) (old non-inverted habit)")
def dr_w12(x, p, training=True):
    if not training: return x * (1 - p)
    return x * (torch.rand(x.shape) >= p) / (1 - p)

@A("dropout", "W", "divides by p (p read as keep probability)")
def dr_w13(x, p, training=True):
    if not training: return x
    return x * (torch.rand(x.shape) >= p) / p

@A("dropout", "W", "rand_like(x) (x's dtype)")
def dr_w14(x, p, training=True):
    if not training: return x
    return x * (torch.rand_like(x) >= p) / (1 - p)

@A("layer_norm", "W", "gamma applied before normalising")
def ln_w12(x, g, b, eps=1e-5):
    y = x * g
    return (y - y.mean(-1, keepdim=True)) / torch.sqrt(y.var(-1, keepdim=True, unbiased=False) + eps) + b

@A("layer_norm", "W", "var + eps ** 2 inside the root")
def ln_w13(x, g, b, eps=1e-5): return _ln(x, g, b, eps ** 2)

@A("residual_sublayer", "W", "pre-LN: LN with eps 1e-6 and unscaled? no: gamma/beta ignored")
def rs_w11(x, sub, norm, norm_first=False):
    one = torch.ones_like(norm["gamma"]); zero = torch.zeros_like(norm["beta"])
    ln = lambda t: ln_r2(t, one, zero)
    return x + sub(ln(x)) if norm_first else ln(x + sub(x))

# ---------------------------------------------------------------- batch 3: argument order, redundant terms
@A("encode", "W", "add_eos and add_bos swapped in the signature")
def en_w10(sentence, vocab, add_eos=False, add_bos=False):
    ids = [vocab.get(w, vocab["<unk>"]) for w in sentence.split()]
    return ([vocab["<bos>"]] if add_bos else []) + ids + ([vocab["<eos>"]] if add_eos else [])

@A("multi_head_attention", "R", "b_k dropped: q . b_k is the same for every key, softmax ignores it")
def mha_r5(query, key, value, params, num_heads, mask=None):
    p2 = dict(params); p2["b_k"] = None
    return mha_r2(query, key, value, p2, num_heads, mask)

@A("layer_norm", "W", "eps argument ignored (1e-5 hard-coded)")
def ln_w14(x, g, b, eps=1e-5): return _ln(x, g, b, 1e-5)

@A("pad_batch", "W", "max_len and pad_id swapped in the signature")
def pb_w10(id_lists, max_len=None, pad_id=0): return pb_r3(id_lists, pad_id, max_len)

@A("apply_rope", "W", "positions used as given but sorted first (a habit from masks)")
def ro_w11(x, positions=None): return ro_r3(x, None if positions is None else positions.sort().values)

@A("residual_sublayer", "W", "Post-LN when norm_first=True and Pre-LN when False (flag read backwards)")
def rs_w12(x, sub, norm, norm_first=False): return rs_r2(x, sub, norm, not norm_first)

@A("feed_forward", "R", "where(h > 0, h, 0) on addmm rows (the fixed h * (h > 0))")
def ff_r4(x, params):
    h = li_r3(x, params["w_1"], params["b_1"])
    h = torch.where(h > 0, h, torch.zeros((), dtype=h.dtype))
    return li_r3(h, params["w_2"], params["b_2"])

@A("feed_forward", "W", "ReLU as (h + |h|) / 2 (NaN at -inf)")
def ff_w8(x, params):
    h = li_r1(x, params["w_1"], params["b_1"])
    return li_r1((h + h.abs()) / 2, params["w_2"], params["b_2"])
