"""Exercises of notebook 02: vocabulary, encode, decode, and a padded (B, L) batch."""
from __future__ import annotations

import torch

from .. import tokenization as tok
from ..tokenization import BOS, EOS, PAD, SPECIALS, UNK, build_vocab, decode, encode, pad_batch
from .core import Case, Contract, Exercise, Mistake, register

CORPUS = ["the cat sat on the mat", "a dog sat"]
# pad 0, bos 1, eos 2, unk 3, the 4, cat 5, sat 6, on 7, mat 8, a 9, dog 10
OTHER_ORDER = (PAD, UNK, BOS, EOS)  # a vocabulary whose <unk> is 1, not 3
_CHARACTERS_HINT = ("iterating over a str gives characters; split the sentence into tokens first: "
                    "sentence.split()")
_SPLIT_HINT = ("split(' ') turns double spaces into '' tokens; split() with no argument splits on "
               "any whitespace")
_LOWERCASE_HINT = ("keep each token as it is written: some tokenizers lowercase (BERT's uncased "
                   "ones), this course's does not, so 'The' and 'the' are two tokens")
ONLY_PAD_UNK = (PAD, UNK)  # a vocabulary without <bos> and <eos>: words start at id 2


# ---- the data every tokenization exercise is also checked on -----------------------------------

# Punctuation left on the words, capitals, a <pad> in mid-sentence, words that only look like
# special tokens (<cls>, <3, <bos>x), extra spaces, an empty string.
TRICKY = ["Hello, world!", "the cat sat.", "the <pad> cat <unk>", "<cls> and <3 and <bos>x", "The  End", ""]


def _tricky_vocab() -> dict[str, int]:
    """A vocabulary of TRICKY whose dict order is not its id order (as a hand-made or loaded one
    may be): an answer that numbers tokens by their place in the dict gets other ids."""
    return dict(reversed(build_vocab(TRICKY).items()))


def _tricky_cases(exercise: str) -> list[Case]:
    """The cases of TRICKY for one exercise: build_vocab, encode, decode or pad_batch."""
    vocab = _tricky_vocab()
    ids = [encode(sentence, vocab, add_bos=True, add_eos=True) for sentence in TRICKY]
    if exercise == "build_vocab":
        return [Case("punctuation, capitals, look-alike specials, an empty string", (TRICKY,))]
    if exercise == "encode":
        return [Case(f"{sentence!r} in a vocab whose dict order is not its id order", (sentence, vocab),
                     {"add_bos": True, "add_eos": True}) for sentence in TRICKY]
    if exercise == "decode":
        mid_pad = [i for row in ids for i in row if i != vocab[EOS]]  # every word, <pad> among them
        return [Case(f"{sentence!r} in a vocab whose dict order is not its id order", (row, vocab))
                for sentence, row in zip(TRICKY, ids)] + [
                Case("every sentence with <bos>, <pad> and <unk> in the middle, no <eos>", (mid_pad, vocab))]
    return [Case("the encoded sentences (one empty but for <bos> <eos>)", (ids, vocab[PAD])),
            Case("a pad id that is not 0", (ids, vocab["<cls>"]), {"max_len": 4})]


# ---- build_vocab ------------------------------------------------------------------------------

def _vocab_cases() -> list[Case]:
    return [
        Case("two sentences sharing words", (["the cat sat", "the dog sat down"],)),
        Case("repeated words", (["a b a c", "c b d", "e"],)),
        Case("extra spaces between words", (["hello  world", " hi there "],)),
        Case("no sentences: only the specials", ([],)),
        Case("your own specials", (["x y", "y z"],), {"specials": ONLY_PAD_UNK}),
        Case("capital letters: 'The' and 'the' are two tokens", (["The cat saw the dog", "The end"],)),
        Case("<unk> and <pad> typed in a sentence keep their ids", (["the <unk> sat", "<pad> the"],)),
    ]


def _vocab(*, split=str.split, specials_first=True, start=0, with_specials=True, order=None,
           own_specials=False):
    """build_vocab with one classic mistake (own_specials: a hard-coded list, not the argument)."""
    def variant(sentences, specials=SPECIALS):
        tokens = [t for s in sentences for t in split(s)]
        if order is not None:
            tokens = order(tokens)
        specials = list(SPECIALS if own_specials else specials) if with_specials else []
        vocab = {}
        for token in (specials + tokens if specials_first else tokens + specials):
            if token not in vocab:
                vocab[token] = len(vocab) + start
        return vocab
    return variant


# The same two mistakes as most learners write them: a special typed in a sentence then
# takes a new id as well (no `if token not in vocab` where the two lists meet).
def _specials_last_overwritten(sentences, specials=SPECIALS):
    vocab = _vocab(with_specials=False)(sentences, specials)
    for token in specials:
        vocab[token] = len(vocab)
    return vocab


def _sorted_tokens_enumerated(sentences, specials=SPECIALS):
    tokens = list(specials) + sorted({t for s in sentences for t in s.split()})
    return {token: i for i, token in enumerate(tokens)}


def _repeated_token_renumbered(sentences, specials=SPECIALS):
    vocab = {s: i for i, s in enumerate(specials)}
    for sentence in sentences:
        for token in sentence.split():
            vocab[token] = len(vocab)  # no `if token not in vocab`
    return vocab


register(Exercise(
    name="build_vocab",
    contract=Contract(text=("sentences",)),
    reference=build_vocab,
    make_cases=lambda: _vocab_cases() + _tricky_cases("build_vocab"),
    solution_sources=(tok.tokenize, build_vocab),
    mistakes=[
        Mistake("specials not numbered first",
                "give the specials ids 0, 1, 2, ... before any word, so <pad> is 0 on every corpus",
                _vocab(specials_first=False), also=(_specials_last_overwritten,)),
        Mistake("tokens sorted instead of numbered by first appearance",
                "walk the sentences in order and give each new token the next id, len(vocab)",
                _vocab(order=lambda tokens: sorted(set(tokens))), also=(_sorted_tokens_enumerated,)),
        Mistake("a repeated token gets a new id",
                "only add a token the first time: `if token not in vocab: vocab[token] = len(vocab)`",
                _repeated_token_renumbered),
        Mistake("ids start at 1",
                "ids are row numbers of the embedding table: the first one is 0 (len(vocab) before adding)",
                _vocab(start=1)),
        Mistake("specials missing",
                "put the specials (<pad>, <bos>, <eos>, <unk>) into the vocabulary first",
                _vocab(with_specials=False)),
        Mistake("characters instead of words",
                _CHARACTERS_HINT,
                _vocab(split=list)),
        Mistake("split(' ') keeps empty tokens",
                _SPLIT_HINT,
                _vocab(split=lambda s: s.split(" "))),
        Mistake("the specials argument is ignored",
                "number the `specials` you were given, not a hard-coded list",
                _vocab(own_specials=True)),
        Mistake("tokens lowercased",
                _LOWERCASE_HINT,
                _vocab(split=lambda s: s.lower().split())),
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
        Case("<bos> only, given by position as the stub orders the flags", ("the dog", vocab, True)),
        Case("a vocab whose <unk> is 1, <bos> 2, <eos> 3; double space", ("zebra the  dog", other),
             {"add_bos": True, "add_eos": True}),
        Case("empty sentence", ("", vocab), {"add_bos": True, "add_eos": True}),
        Case("capital letters: 'The' is not 'the'", ("The cat sat on The mat", vocab)),
        Case("<pad> and <unk> typed in the sentence get their own ids", ("the <pad> cat <unk>", vocab)),
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
    contract=Contract(text=("sentence",), base=1),
    reference=encode,
    make_cases=lambda: _encode_cases() + _tricky_cases("encode"),
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
        Mistake("tokens lowercased",
                _LOWERCASE_HINT,
                _encoder(lambda vocab, token: [vocab.get(token.lower(), vocab[UNK])])),
        Mistake("unknown words added to the vocab",
                "encode only reads the vocab: an unknown word becomes vocab['<unk>']; a new id "
                "would change the caller's dict and have no row in the embedding table",
                _encoder(lambda vocab, token: [vocab.setdefault(token, len(vocab))])),
    ],
))


# ---- decode -----------------------------------------------------------------------------------

def _decode_cases() -> list[Case]:
    vocab = build_vocab(CORPUS)
    other = build_vocab(CORPUS, specials=OTHER_ORDER)
    few = build_vocab(CORPUS, specials=ONLY_PAD_UNK)  # pad 0, unk 1, the 2, cat 3, sat 4, ...
    hearts = build_vocab(["i <3 attention"])
    return [
        Case("<bos> ... <eos> then padding", ([1, 4, 5, 6, 2, 0, 0], vocab)),
        Case("a 1-D tensor with an <unk>", (torch.tensor([1, 9, 10, 3, 6, 2, 0]), vocab)),
        Case("words after <eos>", ([4, 5, 2, 10, 6, 0], vocab)),
        Case("no specials at all", ([9, 10, 6], vocab)),
        Case("skip_specials=False keeps everything", ([1, 4, 3, 2, 0], vocab), {"skip_specials": False}),
        Case("a 1-D tensor", (torch.tensor([1, 7, 4, 8, 2]), vocab)),
        Case("a vocab whose <unk> is 1, <bos> 2, <eos> 3", ([2, 4, 1, 5, 3, 6, 0], other)),
        Case("a vocab with only <pad> and <unk>: ids 2 and 3 are words", ([2, 3, 1, 4, 0], few)),
        Case("no ids at all", ([], vocab)),
        Case("a vocab of one word, no specials", ([0, 0], {"hello": 0})),
        Case("'<3' starts with '<' but is a word, not a special", ([1, 4, 5, 6, 2], hearts)),
    ]


def _decoder(*, stop_at_eos=True, skip=SPECIALS, flag=True, tolist=True, invert=True,
             join=" ".join, by_id=False):
    def variant(ids, vocab, skip_specials=True):
        if not flag:
            skip_specials = True
        if tolist and isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        id_to_token = {i: t for t, i in vocab.items()} if invert else vocab
        tokens = []
        for index in ids:
            token = id_to_token[index]
            if skip_specials and stop_at_eos and (index == 2 if by_id else token == EOS):
                break
            if skip_specials and (index < 4 if by_id else token in skip):
                continue
            tokens.append(token)
        return join(tokens)
    return variant


register(Exercise(
    name="decode",
    contract=Contract(text=("ids",)),
    reference=decode,
    make_cases=lambda: _decode_cases() + _tricky_cases("decode"),
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
        Mistake("special ids hard-coded as 0-3",
                "find the specials by name, id_to_token[i] == '<eos>': another vocabulary gives "
                "them other ids, or none",
                _decoder(by_id=True)),
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
        Case("max_len 1: one id per row", ([[3, 4], [5], []], 2), {"max_len": 1}),
        Case("an empty row", ([[7, 8, 9], []], 0)),
        Case("a single row", ([[2, 3, 4, 5]], 0)),
        Case("rows that are all empty: shape (2, 0)", ([[], []], 0)),
        Case("an empty batch: no longest row, so ValueError", ([], 0), raises=ValueError),
    ]


def _padded_rows(id_lists, pad_id, max_len, *, left=False, truncate=True, use_max_len=True,
                 pads_caller=False, cuts_caller=False):
    length = max_len if (max_len is not None and use_max_len) else max(len(i) for i in id_lists)
    rows = []
    for ids in id_lists:
        kept = list(ids)[:length] if truncate else list(ids)
        padding = [pad_id] * (length - len(kept))
        if cuts_caller:
            del ids[length:]
        if pads_caller:
            ids += padding
        rows.append(padding + kept if left else kept + padding)
    return rows


def _padder(*, dtype=torch.long, pad=None, transpose=False, as_list=False, **how):
    def variant(id_lists, pad_id, max_len=None):
        rows = _padded_rows(id_lists, pad_id if pad is None else pad, max_len, **how)
        if as_list:
            return rows
        batch = torch.tensor(rows, dtype=dtype)
        return batch.T if transpose else batch
    return variant


def _pad_mistake(name, hint, *hows):
    """A mistake made in each way of `hows` (keywords of _padder), with dtype=torch.long or with torch.tensor(rows)
    and no dtype, as most learners write it (long too, except for rows that are all empty: float32)."""
    variants = [_padder(dtype=dtype, **how) for how in hows for dtype in (torch.long, None)]
    return Mistake(name, hint, variants[0], also=tuple(variants[1:]))


register(Exercise(
    name="pad_batch",
    contract=Contract(text=("id_lists", "pad_id")),  # ids as NumPy integers, the batch given twice
    reference=pad_batch,
    make_cases=lambda: _pad_cases() + _tricky_cases("pad_batch"),
    mistakes=[
        _pad_mistake("padding on the left",
                     "pad on the right: the ids first, then pad_id up to length L (left padding is a "
                     "convention of batched text generation, not this course's)",
                     {"left": True}),
        Mistake("ids not torch.long",
                "token ids index the embedding table: make the batch with dtype=torch.long "
                "(without it, torch.tensor([[], []]) is float32)",
                _padder(dtype=torch.float32),
                also=(_padder(dtype=None), _padder(dtype=torch.int32), _padder(dtype=torch.float64))),
        _pad_mistake("pad id hard-coded as 0",
                     "pad with the pad_id argument; it is 0 only in one vocabulary",
                     {"pad": 0}),
        _pad_mistake("max_len ignored",
                     "when max_len is given, L = max_len (cut longer rows, pad shorter ones)",
                     {"use_max_len": False}),
        _pad_mistake("rows longer than max_len not cut",
                     "truncate each row to max_len before padding: ids[:max_len]",
                     {"truncate": False}),
        Mistake("a list instead of a tensor",
                "return one (B, L) tensor: torch.tensor(rows, dtype=torch.long)",
                _padder(as_list=True)),
        _pad_mistake("(L, B) instead of (B, L)",
                     "one row per sentence: the batch axis comes first, shape (B, L) (pad_sequence's "
                     "default, batch_first=False, gives (L, B))",
                     {"transpose": True}),
        _pad_mistake("the caller's id lists edited in place",
                     "build new rows, `list(ids) + [pad_id] * n`, instead of ids.append / ids += ...: "
                     "the caller still needs its own lists",
                     {"pads_caller": True}, {"pads_caller": True, "cuts_caller": True}),
    ],
))
