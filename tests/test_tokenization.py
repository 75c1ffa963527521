"""Notebook 02: sentence -> tokens -> vocab -> ids -> padded (B, L) LongTensor, and back."""
import pytest
import torch

from tfmlib import (BOS, EOS, PAD, SPECIALS, UNK, build_vocab, decode, encode, encode_batch,
                    invert_vocab, pad_batch, tokenize)

CORPUS = ["the cat sat", "the dog  sat down", "a cat"]


def test_tokenize_splits_on_any_whitespace():
    assert tokenize("I love  NLP\tvery\nmuch ") == ["I", "love", "NLP", "very", "much"]
    assert tokenize("") == []


def test_specials_are_numbered_first_in_their_given_order():
    vocab = build_vocab(CORPUS)
    assert SPECIALS == ("<pad>", "<bos>", "<eos>", "<unk>")
    assert [vocab[s] for s in SPECIALS] == [0, 1, 2, 3]
    assert list(vocab)[:4] == list(SPECIALS)


def test_tokens_follow_in_order_of_first_appearance_without_duplicates():
    vocab = build_vocab(CORPUS)
    expected_words = ["the", "cat", "sat", "dog", "down", "a"]  # read off CORPUS by hand
    assert list(vocab) == list(SPECIALS) + expected_words
    assert sorted(vocab.values()) == list(range(len(SPECIALS) + len(expected_words)))


def test_custom_specials_and_a_word_equal_to_a_special_is_not_renumbered():
    vocab = build_vocab(["x <pad> y"], specials=("<pad>", "<unk>"))
    assert vocab == {"<pad>": 0, "<unk>": 1, "x": 2, "y": 3}


def test_build_vocab_accepts_any_iterable_of_sentences():
    assert build_vocab(s for s in CORPUS) == build_vocab(CORPUS)


def test_encode_looks_up_ids_and_unknown_words_become_unk():
    vocab = build_vocab(CORPUS)
    ids = encode("the zebra sat", vocab)
    assert ids == [vocab["the"], vocab[UNK], vocab["sat"]]
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)


@pytest.mark.parametrize("add_bos, add_eos", [(False, False), (True, False), (False, True), (True, True)])
def test_encode_bos_and_eos(add_bos, add_eos):
    vocab = build_vocab(CORPUS)
    ids = encode("a cat", vocab, add_bos=add_bos, add_eos=add_eos)
    expected = [vocab["a"], vocab["cat"]]
    if add_bos:
        expected = [vocab[BOS]] + expected
    if add_eos:
        expected = expected + [vocab[EOS]]
    assert ids == expected


def test_pad_batch_pads_on_the_right_with_long_dtype():
    batch = pad_batch([[5, 6, 7], [8], [9, 10]], pad_id=0)
    assert batch.dtype == torch.long
    assert batch.shape == (3, 3)
    assert batch.tolist() == [[5, 6, 7], [8, 0, 0], [9, 10, 0]]


def test_pad_batch_with_max_len_pads_and_truncates():
    batch = pad_batch([[5, 6, 7], [8]], pad_id=1, max_len=2)
    assert batch.tolist() == [[5, 6], [8, 1]]
    batch = pad_batch([[5], [8]], pad_id=1, max_len=4)
    assert batch.tolist() == [[5, 1, 1, 1], [8, 1, 1, 1]]


def test_pad_batch_accepts_integer_tensors():
    batch = pad_batch([torch.tensor([4, 5]), torch.tensor([6])], pad_id=0)
    assert batch.tolist() == [[4, 5], [6, 0]]
    assert batch.dtype == torch.long


def test_encode_batch_is_bos_ids_eos_then_pad():
    vocab = build_vocab(CORPUS)
    batch = encode_batch(["the cat", "a"], vocab, add_bos=True, add_eos=True)
    assert batch.dtype == torch.long
    pad, bos, eos = vocab[PAD], vocab[BOS], vocab[EOS]
    assert batch.tolist() == [[bos, vocab["the"], vocab["cat"], eos],
                              [bos, vocab["a"], eos, pad]]


def test_invert_vocab_is_the_inverse():
    vocab = build_vocab(CORPUS)
    inverse = invert_vocab(vocab)
    assert all(inverse[i] == token for token, i in vocab.items())
    assert len(inverse) == len(vocab)


@pytest.mark.parametrize("sentence", ["the cat sat", "a", "down the dog sat a cat"])
def test_decode_round_trip(sentence):
    vocab = build_vocab(CORPUS)
    ids = encode(sentence, vocab, add_bos=True, add_eos=True)
    assert decode(ids, vocab) == sentence
    assert decode(torch.tensor(ids), vocab) == sentence


def test_decode_stops_at_eos_and_skips_pad_and_bos():
    vocab = build_vocab(CORPUS)
    batch = encode_batch(["a", "the cat sat"], vocab, add_bos=True, add_eos=True)
    assert [decode(row, vocab) for row in batch] == ["a", "the cat sat"]
    ids = [vocab[BOS], vocab["a"], vocab[EOS], vocab["cat"]]  # anything after <eos> is dropped
    assert decode(ids, vocab) == "a"


def test_decode_keeps_specials_when_asked():
    vocab = build_vocab(CORPUS)
    ids = [vocab[BOS], vocab["a"], vocab[EOS], vocab[PAD]]
    assert decode(ids, vocab, skip_specials=False) == "<bos> a <eos> <pad>"


def test_unknown_words_decode_to_unk_marker_only_when_specials_kept():
    vocab = build_vocab(CORPUS)
    ids = encode("a zebra", vocab)
    assert decode(ids, vocab) == "a"
    assert decode(ids, vocab, skip_specials=False) == "a <unk>"
