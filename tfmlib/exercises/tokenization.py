"""Exercises of notebook 02: vocabulary, encode, decode, and a padded (B, L) batch."""
from __future__ import annotations

import torch

from .. import tokenization as tok
from ..tokenization import BOS, EOS, PAD, SPECIALS, UNK, build_vocab, decode, encode, pad_batch
from .core import Case, Exercise, Mistake, register

CORPUS = ["the cat sat on the mat", "a dog sat"]
# pad 0, bos 1, eos 2, unk 3, the 4, cat 5, sat 6, on 7, mat 8, a 9, dog 10
OTHER_ORDER = (PAD, UNK, BOS, EOS)  # a vocabulary whose <unk> is 1, not 3
_CHARACTERS_HINT = ("iterating over a str gives characters; split the sentence into tokens first: "
                    "sentence.split()")
_SPLIT_HINT = ("split(' ') turns double spaces into '' tokens; split() with no argument splits on "
               "any whitespace")


# ---- build_vocab ------------------------------------------------------------------------------

def _vocab_cases() -> list[Case]:
    return [
        Case("two sentences sharing words", (["the cat sat", "the dog sat down"],)),
        Case("repeated words", (["a b a c", "c b d", "e"],)),
        Case("extra spaces between words", (["hello  world", " hi there "],)),
        Case("no sentences: only the specials", ([],)),
        Case("your own specials", (["x y", "y z"],), {"specials": ("<pad>", "<unk>")}),
    ]


def _vocab(sentences, specials=SPECIALS, *, split=str.split, specials_first=True, start=0,
           with_specials=True, order=None):
    tokens = [t for s in sentences for t in split(s)]
    if order is not None:
        tokens = order(tokens)
    specials = list(specials) if with_specials else []
    vocab = {}
    for token in (specials + tokens if specials_first else tokens + specials):
        if token not in vocab:
            vocab[token] = len(vocab) + start
    return vocab


def _specials_last(sentences, specials=SPECIALS):
    return _vocab(sentences, specials, specials_first=False)


def _sorted_tokens(sentences, specials=SPECIALS):
    return _vocab(sentences, specials, order=lambda tokens: sorted(set(tokens)))


def _repeated_token_renumbered(sentences, specials=SPECIALS):
    vocab = {s: i for i, s in enumerate(specials)}
    for sentence in sentences:
        for token in sentence.split():
            vocab[token] = len(vocab)  # no `if token not in vocab`
    return vocab


def _ids_from_one(sentences, specials=SPECIALS):
    return _vocab(sentences, specials, start=1)


def _specials_missing(sentences, specials=SPECIALS):
    return _vocab(sentences, specials, with_specials=False)


def _characters(sentences, specials=SPECIALS):
    return _vocab(sentences, specials, split=list)


def _split_on_one_space(sentences, specials=SPECIALS):
    return _vocab(sentences, specials, split=lambda s: s.split(" "))


def _specials_argument_ignored(sentences, specials=SPECIALS):
    return _vocab(sentences, SPECIALS)


register(Exercise(
    name="build_vocab",
    reference=build_vocab,
    make_cases=_vocab_cases,
    solution_sources=(tok.tokenize, build_vocab),
    mistakes=[
        Mistake("specials not numbered first",
                "give the specials ids 0, 1, 2, ... before any word, so <pad> is 0 on every corpus",
                _specials_last),
        Mistake("tokens sorted instead of numbered by first appearance",
                "walk the sentences in order and give each new token the next id, len(vocab)",
                _sorted_tokens),
        Mistake("a repeated token gets a new id",
                "only add a token the first time: `if token not in vocab: vocab[token] = len(vocab)`",
                _repeated_token_renumbered),
        Mistake("ids start at 1",
                "ids are row numbers of the embedding table: the first one is 0 (len(vocab) before adding)",
                _ids_from_one),
        Mistake("specials missing",
                "put the specials (<pad>, <bos>, <eos>, <unk>) into the vocabulary first",
                _specials_missing),
        Mistake("characters instead of words",
                _CHARACTERS_HINT,
                _characters),
        Mistake("split(' ') keeps empty tokens",
                _SPLIT_HINT,
                _split_on_one_space),
        Mistake("the specials argument is ignored",
                "number the `specials` you were given, not a hard-coded list",
                _specials_argument_ignored),
    ],
))


# ---- encode -----------------------------------------------------------------------------------

def _encode_cases() -> list[Case]:
    vocab = build_vocab(CORPUS)
    other = build_vocab(CORPUS, specials=OTHER_ORDER)
    return [
        Case("known words only", ("the cat sat", vocab)),
        Case("unknown words", ("the zebra sat on a sofa", vocab)),
        Case("with <bos> and <eos>", ("the cat sat", vocab), {"add_bos": True, "add_eos": True}),
        Case("<eos> only", ("a cat", vocab), {"add_eos": True}),
        Case("a vocab whose <unk> is 1; double space", ("zebra the  dog", other), {"add_bos": True}),
        Case("empty sentence", ("", vocab), {"add_bos": True, "add_eos": True}),
    ]


def _encoder(lookup, *, split=str.split, flags=None, swap=False):
    def variant(sentence, vocab, add_bos=False, add_eos=False):
        if flags is not None:
            add_bos = add_eos = flags
        ids = []
        for token in split(sentence):
            ids += lookup(vocab, token)
        first, last = (EOS, BOS) if swap else (BOS, EOS)
        return [vocab[first]] * add_bos + ids + [vocab[last]] * add_eos
    return variant


def _known_or_unk(vocab, token):
    return [vocab.get(token, vocab[UNK])]


register(Exercise(
    name="encode",
    reference=encode,
    make_cases=_encode_cases,
    solution_sources=(tok.tokenize, tok._special_id, encode),
    mistakes=[
        Mistake("KeyError on an unknown token",
                "vocab[token] fails for words the vocab never saw; use vocab.get(token, vocab['<unk>'])",
                _encoder(lambda vocab, token: [vocab[token]])),
        Mistake("unknown tokens dropped",
                "keep one id per token: an unknown token becomes <unk>, it does not vanish",
                _encoder(lambda vocab, token: [vocab[token]] if token in vocab else [])),
        Mistake("unknown tokens mapped to <pad> (id 0)",
                "the default of .get() must be the <unk> id, vocab['<unk>'], not 0 (which is <pad>)",
                _encoder(lambda vocab, token: [vocab.get(token, 0)])),
        Mistake("<unk> id hard-coded",
                "look the id up, vocab['<unk>']: it is 3 only for one particular order of specials",
                _encoder(lambda vocab, token: [vocab.get(token, 3)])),
        Mistake("add_bos / add_eos ignored",
                "put <bos> in front only when add_bos is True and <eos> at the end only when add_eos is True",
                _encoder(_known_or_unk, flags=False), also=(_encoder(_known_or_unk, flags=True),)),
        Mistake("<bos> and <eos> swapped",
                "<bos> (begin) goes first, <eos> (end) goes last",
                _encoder(_known_or_unk, swap=True)),
        Mistake("characters instead of words",
                _CHARACTERS_HINT,
                _encoder(_known_or_unk, split=list)),
        Mistake("split(' ') keeps empty tokens",
                _SPLIT_HINT,
                _encoder(_known_or_unk, split=lambda s: s.split(" "))),
    ],
))


# ---- decode -----------------------------------------------------------------------------------

def _decode_cases() -> list[Case]:
    vocab = build_vocab(CORPUS)
    return [
        Case("<bos> ... <eos> then padding", ([1, 4, 5, 6, 2, 0, 0], vocab)),
        Case("a 1-D tensor with an <unk>", (torch.tensor([1, 9, 10, 3, 6, 2, 0]), vocab)),
        Case("words after <eos>", ([4, 5, 2, 10, 6, 0], vocab)),
        Case("no specials at all", ([9, 10, 6], vocab)),
        Case("skip_specials=False keeps everything", ([1, 4, 3, 2, 0], vocab), {"skip_specials": False}),
        Case("a 1-D tensor", (torch.tensor([1, 7, 4, 8, 2]), vocab)),
    ]


def _decoder(*, stop_at_eos=True, skip=SPECIALS, flag=True, tolist=True, invert=True,
             join=" ".join):
    def variant(ids, vocab, skip_specials=True):
        if not flag:
            skip_specials = True
        if tolist and isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        id_to_token = {i: t for t, i in vocab.items()} if invert else vocab
        tokens = []
        for index in ids:
            token = id_to_token[index]
            if skip_specials and stop_at_eos and token == EOS:
                break
            if skip_specials and token in skip:
                continue
            tokens.append(token)
        return join(tokens)
    return variant


register(Exercise(
    name="decode",
    reference=decode,
    make_cases=_decode_cases,
    solution_sources=(tok.invert_vocab, decode),
    mistakes=[
        Mistake("does not stop at <eos>",
                "everything after <eos> is padding or garbage: break out of the loop at <eos>",
                _decoder(stop_at_eos=False)),
        Mistake("specials not skipped",
                "with skip_specials, leave out every special token (<pad>, <bos>, <eos>, <unk>)",
                _decoder(skip=()), also=(_decoder(skip=(PAD,)), _decoder(skip=(PAD, BOS)))),
        Mistake("tensor ids used as dict keys",
                "a 0-d tensor is not the int key 5: turn a tensor into ints first, ids.tolist()",
                _decoder(tolist=False)),
        Mistake("vocab not inverted",
                "vocab maps token -> id; build id -> token first: {i: t for t, i in vocab.items()}",
                _decoder(invert=False)),
        Mistake("tokens not joined into a string",
                "return one str: ' '.join(tokens)",
                _decoder(join=list)),
        Mistake("tokens joined without spaces",
                "join with a space between tokens: ' '.join(tokens)",
                _decoder(join="".join)),
        Mistake("skip_specials ignored",
                "when skip_specials is False, keep every token, specials included, and do not stop at <eos>",
                _decoder(flag=False)),
    ],
))


# ---- pad_batch --------------------------------------------------------------------------------

def _pad_cases() -> list[Case]:
    return [
        Case("three rows of different lengths", ([[5, 6, 7], [8], [9, 10]], 0)),
        Case("pad_id 1, and a real id 0", ([[4, 0, 5], [6]], 1)),
        Case("max_len shorter than the longest row", ([[3, 4, 5, 6, 7], [8, 9]], 0), {"max_len": 3}),
        Case("max_len longer than every row", ([[3, 4], [5]], 0), {"max_len": 4}),
        Case("an empty row", ([[7, 8, 9], []], 0)),
        Case("a single row", ([[2, 3, 4, 5]], 0)),
    ]


def _padded_rows(id_lists, pad_id, max_len, *, left=False, truncate=True, use_max_len=True):
    length = max_len if (max_len is not None and use_max_len) else max(len(i) for i in id_lists)
    rows = []
    for ids in id_lists:
        ids = list(ids)[:length] if truncate else list(ids)
        padding = [pad_id] * (length - len(ids))
        rows.append(padding + ids if left else ids + padding)
    return rows


def _padder(*, dtype=torch.long, pad=None, transpose=False, as_list=False, **how):
    def variant(id_lists, pad_id, max_len=None):
        rows = _padded_rows(id_lists, pad_id if pad is None else pad, max_len, **how)
        if as_list:
            return rows
        batch = torch.tensor(rows, dtype=dtype)
        return batch.T if transpose else batch
    return variant


register(Exercise(
    name="pad_batch",
    reference=pad_batch,
    make_cases=_pad_cases,
    mistakes=[
        Mistake("padding on the left",
                "pad on the right: the ids first, then pad_id up to length L",
                _padder(left=True)),
        Mistake("ids not torch.long",
                "token ids index the embedding table: make the batch with dtype=torch.long",
                _padder(dtype=torch.float32),
                also=(_padder(dtype=torch.int32), _padder(dtype=torch.float64))),
        Mistake("pad id hard-coded as 0",
                "pad with the pad_id argument; it is 0 only in one vocabulary",
                _padder(pad=0)),
        Mistake("max_len ignored",
                "when max_len is given, L = max_len (cut longer rows, pad shorter ones)",
                _padder(use_max_len=False)),
        Mistake("rows longer than max_len not cut",
                "truncate each row to max_len before padding: ids[:max_len]",
                _padder(truncate=False)),
        Mistake("a list instead of a tensor",
                "return one (B, L) tensor: torch.tensor(rows, dtype=torch.long)",
                _padder(as_list=True)),
        Mistake("(L, B) instead of (B, L)",
                "one row per sentence: the batch axis comes first, shape (B, L)",
                _padder(transpose=True)),
    ],
))
