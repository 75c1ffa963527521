"""The random cases of the exercises of tfmlib/exercises/tokenization.py: many seeded cases of the same
kinds as the notebook's, for judging whether two functions behave the same."""
from __future__ import annotations

import random

import torch

from tfmlib.exercises.core import Case
from tfmlib.exercises.tokenization import ONLY_PAD_UNK, OTHER_ORDER
from tfmlib.tokenization import BOS, EOS, PAD, SPECIALS, UNK, build_vocab

# Words with capitals, punctuation, an accent, and words spelled like special tokens.
_WORDS = ("the", "The", "cat", "Cat", "sat", "on", "mat", "a", "dog", "I", "love", "NLP",
          "café", "it's", "end.", ",", "<3", "<mask>")
_SPACES = (" ", " ", " ", "  ", "\t", "\n")
_SPECIALS_CHOICES = (SPECIALS, OTHER_ORDER, (UNK, EOS, BOS, PAD), (*SPECIALS, "<mask>"))


def _random_sentence(rng: random.Random, words=_WORDS, most=6) -> str:
    tokens = [rng.choice(words + SPECIALS) if rng.random() < 0.1 else rng.choice(words)
              for _ in range(rng.randint(0, most))]
    edges = rng.choice(("", " ", "\n"))
    return edges + "".join(t + rng.choice(_SPACES) for t in tokens).rstrip() + edges


def _random_corpus(rng: random.Random) -> list[str]:
    return [_random_sentence(rng) for _ in range(rng.randint(0, 4))]


def _random_vocab(rng: random.Random, specials=None) -> dict[str, int]:
    """A vocab from a random corpus; sometimes its ids are shuffled, as a hand-made one might be."""
    if specials is None:
        specials = rng.choice(_SPECIALS_CHOICES)
    vocab = build_vocab(_random_corpus(rng), specials)
    if rng.random() < 0.25:
        ids = list(vocab.values())
        rng.shuffle(ids)
        vocab = dict(zip(vocab, ids))
    return vocab


def _vocab_random_cases(seed: int) -> list[Case]:
    """Random corpora (0-4 sentences, empty and blank ones, tabs, capitals, typed specials),
    with the default specials, given ones in another order, fewer, more, or none."""
    rng = random.Random(200 + seed)
    cases = [Case("default specials", (_random_corpus(rng),)) for _ in range(4)]
    for specials in (*_SPECIALS_CHOICES, ONLY_PAD_UNK, ("[PAD]", "[UNK]", "[CLS]", "[SEP]"), ()):
        cases.append(Case("given specials", (_random_corpus(rng), specials)))
    return cases


def _encode_random_cases(seed: int) -> list[Case]:
    """Random sentences (known, unknown and capitalised words, typed specials, odd spacing,
    empty) with random add_bos / add_eos, in vocabs with the specials in any order."""
    rng = random.Random(300 + seed)
    cases = []
    for _ in range(10):
        vocab = _random_vocab(rng)
        sentence = _random_sentence(rng, _WORDS + ("zebra", "sofa"), most=8)
        flags = {name: rng.random() < 0.5 for name in ("add_bos", "add_eos") if rng.random() < 0.7}
        cases.append(Case("random sentence", (sentence, vocab), flags))
    cases.append(Case("flags by position", (_random_sentence(rng), _random_vocab(rng), True, False)))
    return cases


def _decode_random_cases(seed: int) -> list[Case]:
    """Random ids (lists and 1-D tensors, empty, specials anywhere, several <eos> or none)
    in vocabs with the specials in any order, only some of them, or none; one of one word."""
    rng = random.Random(400 + seed)
    vocabs = [_random_vocab(rng, specials)
              for specials in (*_SPECIALS_CHOICES, ONLY_PAD_UNK, (), *[None] * 4)]
    cases = []
    for vocab in vocabs + [{rng.choice(_WORDS): 0}]:
        ids = [rng.choice(list(vocab.values())) for _ in range(rng.randint(0, 9) if vocab else 0)]
        if rng.random() < 0.5:
            ids = torch.tensor(ids, dtype=torch.long)
        flag = {} if rng.random() < 0.3 else {"skip_specials": rng.random() < 0.6}
        cases.append(Case("random ids", (ids, vocab), flag))
    return cases


def _pad_random_cases(seed: int) -> list[Case]:
    """1-5 rows of 0-6 ids (the pad id among them), any pad id, max_len None, shorter,
    equal or longer than the longest row, given by position or keyword; and []."""
    rng = random.Random(500 + seed)
    cases = []
    for _ in range(10):
        rows = [[rng.randint(0, 12) for _ in range(rng.randint(0, 6))] for _ in range(rng.randint(1, 5))]
        pad_id = rng.choice((0, 0, 1, 3, 99))
        longest = max(map(len, rows))
        max_len = rng.choice((None, None, 1, max(1, longest - 1), max(1, longest), longest + 2))
        if max_len is None:
            cases.append(Case("random rows", (rows, pad_id)))
        elif rng.random() < 0.5:
            cases.append(Case("random rows, max_len by keyword", (rows, pad_id), {"max_len": max_len}))
        else:
            cases.append(Case("random rows, max_len by position", (rows, pad_id, max_len)))
    cases.append(Case("an empty batch", ([], rng.randint(0, 3)), raises=ValueError))
    return cases


# exercise name -> seed -> cases
RANDOM_CASES = {
    "build_vocab": _vocab_random_cases,
    "encode": _encode_random_cases,
    "decode": _decode_random_cases,
    "pad_batch": _pad_random_cases,
}
