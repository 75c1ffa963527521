"""Notebook 02: sentence -> tokens -> ids -> a padded (B, L) LongTensor, and back."""
from __future__ import annotations

import numbers
from collections import Counter
from collections.abc import Iterable, Sequence

import torch

from ._validation import require_integer_ids, require_token_id

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)


def tokenize(sentence: str) -> list[str]:
    """Split on whitespace: "I love NLP" -> ["I", "love", "NLP"]."""
    _check_sentence(sentence)
    return sentence.split()


def build_vocab(sentences: Iterable[str], specials: Sequence[str] = SPECIALS) -> dict[str, int]:
    """Token -> id. Specials get 0, 1, 2, ... first; then tokens in order of first appearance.

    Specials first means `<pad>` is 0 on every corpus, so padding never collides
    with a real word's id.
    """
    _check_build_vocab_inputs(sentences, specials)
    vocab: dict[str, int] = {}
    for token in specials:
        vocab.setdefault(token, len(vocab))
    for sentence in sentences:
        for token in tokenize(sentence):
            vocab.setdefault(token, len(vocab))
    return vocab


def invert_vocab(vocab: dict[str, int]) -> dict[int, str]:
    """Id -> token, the lookup `decode` needs."""
    _check_vocab(vocab)
    return {index: token for token, index in vocab.items()}


def _special_id(vocab: dict[str, int], token: str) -> int:
    _check_special_token(vocab, token)
    return vocab[token]


def encode(sentence: str, vocab: dict[str, int], add_bos: bool = False,
           add_eos: bool = False) -> list[int]:
    """Sentence -> list of ids; a token missing from `vocab` becomes `<unk>`."""
    unk_id = _special_id(vocab, UNK)
    ids = [vocab.get(token, unk_id) for token in tokenize(sentence)]
    if add_bos:
        ids.insert(0, _special_id(vocab, BOS))
    if add_eos:
        ids.append(_special_id(vocab, EOS))
    return ids


def decode(ids, vocab: dict[str, int], skip_specials: bool = True) -> str:
    """Ids (list or 1-D tensor) -> sentence. Stops at `<eos>`; drops specials if asked."""
    _check_decode_inputs(ids, vocab, skip_specials)
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    id_to_token = invert_vocab(vocab)
    tokens = []
    for index in ids:
        token = id_to_token[index]
        if token == EOS and skip_specials:
            break
        if skip_specials and token in SPECIALS:
            continue
        tokens.append(token)
    return " ".join(tokens)


def pad_batch(id_lists: Sequence[Sequence[int]], pad_id: int,
              max_len: int | None = None) -> torch.Tensor:
    """Lists of ids of different lengths -> one (B, L) LongTensor, padded on the right.

    L is the longest list, or `max_len` (longer lists are truncated to it).
    """
    _check_pad_batch_inputs(id_lists, pad_id, max_len)
    length = max_len if max_len is not None else max(len(ids) for ids in id_lists)
    batch = torch.full((len(id_lists), length), pad_id, dtype=torch.long)  # (B, L)
    for row, ids in enumerate(id_lists):
        ids = list(ids)[:length]
        batch[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return batch


def encode_batch(sentences: Sequence[str], vocab: dict[str, int], add_bos: bool = False,
                 add_eos: bool = False, max_len: int | None = None) -> torch.Tensor:
    """Sentences -> (B, L) LongTensor: the whole of notebook 02 in one call."""
    if isinstance(sentences, str):
        raise TypeError("sentences: expected a list of sentences, got a single str")
    if len(sentences) == 0:
        raise ValueError("sentences: expected at least one sentence, got an empty batch")
    id_lists = [encode(s, vocab, add_bos=add_bos, add_eos=add_eos) for s in sentences]
    return pad_batch(id_lists, _special_id(vocab, PAD), max_len=max_len)


def _check_sentence(sentence) -> None:
    if not isinstance(sentence, str):
        raise TypeError(f"sentence: expected a str, got {type(sentence).__name__}")


def _check_build_vocab_inputs(sentences, specials) -> None:
    if isinstance(sentences, str):
        raise TypeError("sentences: expected a list of sentences, got a single str")
    if not hasattr(sentences, "__iter__"):
        raise TypeError(f"sentences: expected a list of sentences, got {type(sentences).__name__}")
    # a str would give one special per character; a generator would be used up by this check
    if isinstance(specials, str) or iter(specials) is specials:
        raise TypeError(f"specials: expected a list of tokens such as {list(SPECIALS)}, "
                        f"got {specials!r}")
    repeated = [token for token, count in Counter(specials).items() if count > 1]
    if repeated:  # a repeat gets no id of its own: the vocabulary would be one special short
        raise ValueError(f"specials: expected distinct tokens, got {repeated} more than once "
                         f"in {list(specials)}")


def _check_vocab(vocab) -> None:
    if not isinstance(vocab, dict):
        raise TypeError(f"vocab: expected a dict token -> id, got {type(vocab).__name__}")


def _check_special_token(vocab, token: str) -> None:
    _check_vocab(vocab)
    if token not in vocab:
        raise ValueError(
            f"vocab: expected the special token {token!r} in the vocabulary, "
            f"got a vocab without it (first keys: {list(vocab)[:5]})"
        )


def _check_decode_inputs(ids, vocab, skip_specials: bool) -> None:
    """Every id up to the first <eos> (where decoding stops) must be in the vocabulary."""
    if isinstance(ids, torch.Tensor):
        require_integer_ids("ids", ids)
        if ids.dim() != 1:
            raise ValueError(f"ids: expected a 1-D tensor (L,), got shape {tuple(ids.shape)}")
        ids = ids.tolist()
    elif not hasattr(ids, "__iter__") or iter(ids) is ids:  # a generator would be used up here
        raise TypeError(f"ids: expected a list of ids or a 1-D tensor, got {type(ids).__name__}")
    _check_vocab(vocab)
    id_to_token = invert_vocab(vocab)
    for position, index in enumerate(ids):
        if isinstance(index, (list, tuple)):
            raise TypeError(f"ids[{position}]: expected one id, got {index!r}; "
                            f"decode a batch one row at a time")
        if index not in id_to_token:
            raise ValueError(f"ids: id {index} is not in the vocabulary (size {len(vocab)})")
        if skip_specials and id_to_token[index] == EOS:
            break


def _check_pad_batch_inputs(id_lists, pad_id, max_len) -> None:
    if not hasattr(id_lists, "__len__"):
        raise TypeError(f"id_lists: expected a list of id lists, got {type(id_lists).__name__}")
    if len(id_lists) == 0:
        raise ValueError("id_lists: expected at least one sequence, got an empty batch")
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int)):
        raise TypeError(f"max_len: expected a positive int or None, got {max_len!r}")
    if max_len is not None and max_len <= 0:
        raise ValueError(f"max_len: expected a positive int or None, got {max_len!r}")
    require_token_id("pad_id", pad_id)
    for row, ids in enumerate(id_lists):
        if isinstance(ids, torch.Tensor):
            ids = require_integer_ids(f"id_lists[{row}]", ids).tolist()
        if not hasattr(ids, "__len__"):  # a flat list of ids is one sequence, not a batch
            raise TypeError(f"id_lists[{row}]: expected a list of ids, got {ids!r}; "
                            f"for one sequence pass [ids]")
        # Python ints or NumPy integers (notebook 02 promises both); torch.tensor(..., long) would truncate 2.7 to 2
        if not all(isinstance(i, numbers.Integral) for i in ids):
            raise TypeError(f"id_lists[{row}]: expected integer ids, got {list(ids)!r}")
