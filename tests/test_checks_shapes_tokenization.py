"""The checks of notebooks 01 and 02 (broadcast_shape, build_vocab, encode, decode, pad_batch)
cannot be fooled: answers written the way a learner writes them in a notebook cell.

  - side effects: an answer that edits the caller's lists or vocab fails, and is named
    where the slip is a classic one;
  - cases the checks used to skip: capital letters, other vocabularies, words spelled
    like specials, size-0 axes, empty batches and rows;
  - the error message broadcast_shape must raise: it names both clashing sizes;
  - a learner who makes exactly one catalogued mistake is named for it;
  - conventions of other libraries are named as such in the hint;
  - diagnoses are short and readable;
  - correct but unusual answers pass.
(No exercise here has floating-point outputs, so there are no tolerances to test.)
"""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tfmlib.exercises import REGISTRY, Case, check

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


def assert_passes(name, fn, cases=None):
    result = check(name, fn, cases)
    assert result, str(result)


def assert_fails(name, fn):
    result = check(name, fn)
    assert not result and result.status in ("failed", "mistake"), str(result)
    return result


def assert_named(name, fn, mistake):
    result = check(name, fn)
    assert result.status == "mistake" and result.mistake == mistake, str(result)
    assert "hint: " in result.details
    return result


# ==== broadcast_shape ==========================================================================

def _broadcast(shape_a, shape_b, message):
    """The rule, raising ValueError(message(size_a, size_b, axis, a, b)) on a clash."""
    n = max(len(shape_a), len(shape_b))
    a = (1,) * (n - len(shape_a)) + tuple(shape_a)
    b = (1,) * (n - len(shape_b)) + tuple(shape_b)
    out = []
    for axis in range(n):
        if a[axis] != b[axis] and 1 not in (a[axis], b[axis]):
            raise ValueError(message(a[axis], b[axis], axis - n, a, b))
        out.append(b[axis] if a[axis] == 1 else a[axis])
    return tuple(out)


def bs_names_the_shapes_only(shape_a, shape_b):
    return _broadcast(shape_a, shape_b, lambda x, y, axis, a, b: f"shapes {shape_a} and {shape_b} clash")


def bs_names_the_padded_shapes(shape_a, shape_b):
    return _broadcast(shape_a, shape_b, lambda x, y, axis, a, b: f"cannot broadcast {list(a)} with {list(b)}")


def bs_names_torch_sizes(shape_a, shape_b):
    return _broadcast(shape_a, shape_b,
                      lambda x, y, axis, a, b: f"{torch.Size(shape_a)} vs {torch.Size(shape_b)}")


def bs_names_only_the_axis(shape_a, shape_b):   # what the notebook's old wording asked for
    return _broadcast(shape_a, shape_b, lambda x, y, axis, a, b: f"axis {axis} clashes")


def bs_names_one_size(shape_a, shape_b):
    return _broadcast(shape_a, shape_b, lambda x, y, axis, a, b: f"axis {axis}: size {x} is not 1")


def bs_names_sizes_and_axis(shape_a, shape_b):
    return _broadcast(shape_a, shape_b, lambda x, y, axis, a, b: f"axis {axis}: {x} != {y}.")


def bs_names_sizes_as_a_list(shape_a, shape_b):
    return _broadcast(shape_a, shape_b, lambda x, y, axis, a, b: f"sizes {[x, y]} on axis {axis}")


def bs_from_the_right_with_shapes_and_sizes(shape_a, shape_b):
    """Walks from the right: on two clashing axes it reports the last one, not the first."""
    out = []
    for i, (x, y) in enumerate(itertools.zip_longest(shape_a[::-1], shape_b[::-1], fillvalue=1)):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"{shape_a} and {shape_b}: axis -{i + 1} has {x} and {y}")
        out.insert(0, y if x == 1 else x)
    return tuple(out)


def bs_numpy(shape_a, shape_b):
    try:
        return tuple(int(s) for s in np.broadcast_shapes(tuple(shape_a), tuple(shape_b)))
    except ValueError:   # numpy's message names the shapes only: say the sizes too
        pairs = zip(shape_a[::-1], shape_b[::-1])
        x, y = next((x, y) for x, y in pairs if x != y and 1 not in (x, y))
        raise ValueError(f"sizes {x} and {y} clash") from None


def bs_recursive(shape_a, shape_b):
    if not shape_a or not shape_b:
        return tuple(shape_a) or tuple(shape_b)
    *rest_a, x = shape_a
    *rest_b, y = shape_b
    if x != y and 1 not in (x, y):
        raise ValueError(f"last sizes {x} and {y} clash")
    return bs_recursive(tuple(rest_a), tuple(rest_b)) + (y if x == 1 else x,)


def bs_max(shape_a, shape_b):
    a, b = list(shape_a), list(shape_b)
    while len(a) < len(b):
        a.insert(0, 1)
    while len(b) < len(a):
        b.insert(0, 1)
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"sizes {x} and {y} clash")
        out.append(max(x, y))
    return tuple(out)


def bs_zero_as_one(shape_a, shape_b):
    """Lets a size 0 pass like a size 1: (0,) with (2,) 'broadcasts' to (0,)."""
    out = []
    for x, y in itertools.zip_longest(shape_a[::-1], shape_b[::-1], fillvalue=1):
        if x != y and min(x, y) > 1:
            raise ValueError(f"sizes {x} and {y} clash")
        out.insert(0, y if x == 1 else x)
    return tuple(out)


@pytest.mark.parametrize("fn", [bs_names_the_shapes_only, bs_names_the_padded_shapes,
                                bs_names_torch_sizes, bs_names_only_the_axis, bs_names_one_size])
def test_a_clash_message_without_both_sizes_is_named(fn):
    result = assert_named("broadcast_shape", fn, "error message does not say which sizes clash")
    assert "ValueError naming both clashing sizes" in result.details
    assert "in _broadcast, line" in result.details and "raise ValueError(" in result.details  # theirs


def test_the_message_is_shown_when_the_clash_message_is_the_only_problem_left():
    result = check("broadcast_shape", bs_names_the_shapes_only)
    assert "ValueError: shapes (4, 3) and (2, 3) clash" in result.details


@pytest.mark.parametrize("fn", [bs_names_sizes_and_axis, bs_names_sizes_as_a_list,
                                bs_from_the_right_with_shapes_and_sizes, bs_recursive])  # bs_numpy: NumPy's own
def test_messages_that_name_both_sizes_pass_whatever_else_they_say(fn):
    assert_passes("broadcast_shape", fn)


def test_any_clashing_axis_may_be_reported_when_two_clash():
    clash = next(case for case in REGISTRY["broadcast_shape"].make_cases() if case.raises)
    cases = [Case("two clashing axes", ((4, 3), (2, 5)), raises=clash.raises),
             Case("two clashing axes, 3-D", ((6, 4, 3), (7, 2, 5)), raises=clash.raises)]
    assert_passes("broadcast_shape", bs_names_sizes_and_axis, cases)                # the first
    assert_passes("broadcast_shape", bs_from_the_right_with_shapes_and_sizes, cases)  # the last
    assert not check("broadcast_shape", bs_names_the_shapes_only, cases)


def test_max_of_the_sizes_fails_on_a_size_0_axis_and_is_named():
    result = assert_named("broadcast_shape", bs_max, "max() of the two sizes: size 1 against size 0 gives 1")
    assert "(0, 3) with (1, 3) gives (0, 3)" in result.details


def test_size_0_is_not_1_a_clash_with_2_must_raise():
    result = assert_fails("broadcast_shape", bs_zero_as_one)
    assert "expected your function to raise ValueError naming both clashing sizes" in result.message


def test_the_reference_message_names_both_sizes():
    with pytest.raises(ValueError, match=r"sizes 4 and 2"):
        REGISTRY["broadcast_shape"].reference((4, 3), (2, 3))


# ==== build_vocab ==============================================================================

def vocab_lowercased(sentences, specials=SPECIALS):
    vocab = {s: i for i, s in enumerate(specials)}
    for sentence in sentences:
        for word in sentence.lower().split():
            vocab.setdefault(word, len(vocab))
    return vocab


def vocab_specials_put_into_the_sentences(sentences, specials=SPECIALS):
    sentences.insert(0, " ".join(specials))   # the caller's list now has one more sentence
    vocab = {}
    for sentence in sentences:
        for word in sentence.split():
            if word not in vocab:
                vocab[word] = len(vocab)
    return vocab


def vocab_no_membership_test(sentences, specials=SPECIALS):
    """A typed '<unk>' gets a new id, as does every repeated word."""
    vocab = {s: i for i, s in enumerate(specials)}
    for sentence in sentences:
        for word in sentence.split():
            vocab[word] = len(vocab)
    return vocab


def vocab_regex_split(sentences, specials=SPECIALS):
    vocab = dict.fromkeys(specials)
    for sentence in sentences:
        vocab.update(dict.fromkeys(w for w in re.split(r"\s+", sentence) if w))
    return {token: i for i, token in enumerate(vocab)}


def vocab_counter_then_first_seen(sentences, specials=SPECIALS):
    seen = []
    for token in itertools.chain(specials, *(s.split() for s in sentences)):
        if token not in seen:
            seen.append(token)
    return dict(zip(seen, range(len(seen))))


def test_a_lowercasing_vocab_is_named_and_the_convention_is_explained():
    result = assert_named("build_vocab", vocab_lowercased, "tokens lowercased")
    assert "uncased" in result.details and "'The' and 'the' are two tokens" in result.details


def test_a_vocab_that_edits_the_callers_sentences_fails():
    result = assert_fails("build_vocab", vocab_specials_put_into_the_sentences)
    assert "changed its input `sentences` in place" in result.message


def test_renumbering_a_typed_special_is_named():
    assert_named("build_vocab", vocab_no_membership_test, "a repeated token gets a new id")


@pytest.mark.parametrize("fn", [vocab_regex_split, vocab_counter_then_first_seen])
def test_unusual_vocab_builders_pass(fn):
    assert_passes("build_vocab", fn)


# ==== encode ===================================================================================

def encode_lowercased(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w, vocab["<unk>"]) for w in sentence.lower().split()]
    return [vocab["<bos>"]] * add_bos + ids + [vocab["<eos>"]] * add_eos


def encode_adds_unknown_words(sentence, vocab, add_bos=False, add_eos=False):
    ids = []
    for w in sentence.split():
        if w not in vocab:
            vocab[w] = len(vocab)
        ids.append(vocab[w])
    return [vocab["<bos>"]] * add_bos + ids + [vocab["<eos>"]] * add_eos


def encode_hard_coded_bos_eos(sentence, vocab, add_bos=False, add_eos=False):
    ids = [vocab.get(w, vocab["<unk>"]) for w in sentence.split()]
    return ([1] if add_bos else []) + ids + ([2] if add_eos else [])


def encode_drops_typed_specials(sentence, vocab, add_bos=False, add_eos=False):
    words = [w for w in sentence.split() if w not in SPECIALS]
    ids = [vocab.get(w, vocab["<unk>"]) for w in words]
    return [vocab["<bos>"]] * add_bos + ids + [vocab["<eos>"]] * add_eos


def encode_map(sentence, vocab, add_bos=False, add_eos=False):
    unk = vocab["<unk>"]
    middle = list(map(lambda w: vocab[w] if w in vocab else unk, sentence.split()))
    return [vocab["<bos>"]] * bool(add_bos) + middle + [vocab["<eos>"]] * bool(add_eos)


def encode_with_a_tensor_inside(sentence, vocab, add_bos=False, add_eos=False):
    words = ["<bos>"] * add_bos + sentence.split() + ["<eos>"] * add_eos
    ids = torch.tensor([vocab.get(w, vocab["<unk>"]) for w in words], dtype=torch.long)
    return ids.tolist()


def test_a_lowercasing_encoder_is_named():
    assert_named("encode", encode_lowercased, "tokens lowercased")


def test_an_encoder_that_grows_the_callers_vocab_is_named():
    assert_named("encode", encode_adds_unknown_words, "unknown words added to the vocab")


def test_hard_coded_bos_and_eos_ids_fail_on_another_vocab():
    result = assert_fails("encode", encode_hard_coded_bos_eos)
    assert "<bos> 2, <eos> 3" in result.details


def test_typed_specials_must_keep_their_ids():
    result = assert_fails("encode", encode_drops_typed_specials)
    assert "typed in the sentence" in result.details


@pytest.mark.parametrize("fn", [encode_map, encode_with_a_tensor_inside])
def test_unusual_encoders_pass(fn):
    assert_passes("encode", fn)


# ==== decode ===================================================================================

def decode_hard_coded_ids(ids, vocab, skip_specials=True):
    id_to_token = {i: t for t, i in vocab.items()}
    words = []
    for i in [int(i) for i in ids]:
        if skip_specials and i == 2:
            break
        if skip_specials and i in (0, 1, 2, 3):
            continue
        words.append(id_to_token[i])
    return " ".join(words)


def decode_angle_brackets_are_special(ids, vocab, skip_specials=True):
    id_to_token = {i: t for t, i in vocab.items()}
    words = []
    for i in [int(i) for i in ids]:
        token = id_to_token[i]
        if skip_specials and token == "<eos>":
            break
        if skip_specials and token.startswith("<"):
            continue
        words.append(token)
    return " ".join(words)


def decode_strips_the_callers_padding(ids, vocab, skip_specials=True):
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    while ids and ids[-1] == vocab["<pad>"]:
        ids.pop()   # the caller's list loses its padding
    id_to_token = {i: t for t, i in vocab.items()}
    tokens = [id_to_token[i] for i in ids]
    if skip_specials:
        tokens = list(itertools.takewhile(lambda t: t != "<eos>", tokens))
        tokens = [t for t in tokens if t not in SPECIALS]
    return " ".join(tokens)


def decode_takewhile(ids, vocab, skip_specials=True):
    id_to_token = dict(zip(vocab.values(), vocab.keys()))
    tokens = (id_to_token[int(i)] for i in ids)
    if skip_specials:
        tokens = (t for t in itertools.takewhile(lambda t: t != "<eos>", tokens) if t not in SPECIALS)
    return " ".join(tokens)


def decode_numpy(ids, vocab, skip_specials=True):
    ids = np.asarray(ids, dtype=np.int64)
    names = np.empty(len(vocab), dtype=object)
    for token, i in vocab.items():
        names[i] = token
    tokens = list(names[ids]) if len(ids) else []
    if skip_specials:
        if "<eos>" in tokens:
            tokens = tokens[: tokens.index("<eos>")]
        tokens = [t for t in tokens if t not in SPECIALS]
    return " ".join(tokens)


def test_hard_coded_special_ids_are_named():
    assert_named("decode", decode_hard_coded_ids, "special ids hard-coded as 0-3")


def test_a_word_starting_with_an_angle_bracket_is_kept():
    result = assert_fails("decode", decode_angle_brackets_are_special)
    assert "'<3'" in result.details


def test_a_decoder_that_edits_the_callers_ids_fails():
    result = assert_fails("decode", decode_strips_the_callers_padding)
    assert "changed its input `ids` in place" in result.message


@pytest.mark.parametrize("fn", [decode_takewhile, decode_numpy])
def test_unusual_decoders_pass(fn):
    assert_passes("decode", fn)


# ==== pad_batch ================================================================================

def pad_appends_to_the_callers_lists(id_lists, pad_id, max_len=None):
    length = max_len if max_len is not None else max(len(ids) for ids in id_lists)
    for ids in id_lists:
        while len(ids) < length:
            ids.append(pad_id)
    return torch.tensor([ids[:length] for ids in id_lists], dtype=torch.long)


def pad_cuts_and_pads_in_place(id_lists, pad_id, max_len=None):
    length = max_len if max_len is not None else max(len(ids) for ids in id_lists)
    for ids in id_lists:
        del ids[length:]
        ids += [pad_id] * (length - len(ids))
    return torch.tensor(id_lists, dtype=torch.long)


def pad_empty_batch_as_an_empty_tensor(id_lists, pad_id, max_len=None):
    length = max_len if max_len is not None else max((len(ids) for ids in id_lists), default=0)
    batch = torch.full((len(id_lists), length), pad_id, dtype=torch.long)
    for row, ids in enumerate(id_lists):
        batch[row, : len(ids[:length])] = torch.tensor(ids[:length], dtype=torch.long)
    return batch


def pad_without_dtype(id_lists, pad_id, max_len=None):
    length = max_len if max_len is not None else max(len(ids) for ids in id_lists)
    return torch.tensor([list(ids[:length]) + [pad_id] * (length - len(ids[:length])) for ids in id_lists])


def pad_copies_then_appends(id_lists, pad_id, max_len=None):
    length = max_len if max_len is not None else max(len(ids) for ids in id_lists)
    rows = [list(ids)[:length] for ids in id_lists]
    for row in rows:
        row.extend([pad_id] * (length - len(row)))
    return torch.tensor(rows, dtype=torch.long)


def pad_with_where(id_lists, pad_id, max_len=None):
    length = max_len if max_len is not None else max(len(ids) for ids in id_lists)
    widest = max(length, max(len(ids) for ids in id_lists))
    values = torch.zeros(len(id_lists), widest, dtype=torch.long)
    for row, ids in enumerate(id_lists):
        values[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    lengths = torch.tensor([len(ids) for ids in id_lists])
    real = torch.arange(widest)[None, :] < lengths[:, None]
    return torch.where(real, values, pad_id)[:, :length]


def pad_transposed_back(id_lists, pad_id, max_len=None):
    """Builds (L, B) column by column and returns its transpose: a non-contiguous (B, L)."""
    length = max_len if max_len is not None else max(len(ids) for ids in id_lists)
    columns = torch.full((length, len(id_lists)), pad_id, dtype=torch.long)
    for row, ids in enumerate(id_lists):
        for position, token in enumerate(ids[:length]):
            columns[position, row] = token
    return columns.T


def pad_stacked_rows(id_lists, pad_id, max_len=None):
    length = max_len if max_len is not None else max(len(ids) for ids in id_lists)
    rows = [F.pad(torch.tensor(ids[:length], dtype=torch.long), (0, length - len(ids[:length])),
                  value=pad_id) for ids in id_lists]
    return torch.stack(rows)


@pytest.mark.parametrize("fn", [pad_appends_to_the_callers_lists, pad_cuts_and_pads_in_place])
def test_padding_the_callers_lists_in_place_is_named(fn):
    result = assert_named("pad_batch", fn, "the caller's id lists edited in place")
    assert "the caller still needs its own lists" in result.details


def test_an_empty_batch_must_raise_value_error():
    result = assert_fails("pad_batch", pad_empty_batch_as_an_empty_tensor)
    assert "expected your function to raise ValueError" in result.message
    assert "an empty batch" in result.details


def test_rows_that_are_all_empty_still_need_long_ids():
    result = assert_named("pad_batch", pad_without_dtype, "ids not torch.long")   # float32 only there
    assert "dtype torch.float32" in result.details and "all empty" in result.details


@pytest.mark.parametrize("fn", [pad_copies_then_appends, pad_with_where, pad_transposed_back,
                                pad_stacked_rows])
def test_unusual_padders_pass(fn):
    assert_passes("pad_batch", fn)


def test_the_non_contiguous_answer_really_is_non_contiguous():
    assert not pad_transposed_back([[1, 2], [3]], 0).is_contiguous()


# ==== conventions, and readable diagnoses ======================================================

def pad_left(id_lists, pad_id, max_len=None):
    length = max_len if max_len is not None else max(len(ids) for ids in id_lists)
    return torch.tensor([[pad_id] * (length - len(ids[:length])) + list(ids[:length]) for ids in id_lists])


def pad_sequence_default(id_lists, pad_id, max_len=None):
    length = max_len if max_len is not None else max(len(ids) for ids in id_lists)
    rows = [torch.tensor(list(ids[:length]) + [pad_id] * (length - len(ids[:length])), dtype=torch.long)
            for ids in id_lists]
    return torch.nn.utils.rnn.pad_sequence(rows, padding_value=pad_id)   # batch_first=False


@pytest.mark.parametrize("fn, mistake, convention", [
    (pad_left, "padding on the left", "text generation"),
    (pad_sequence_default, "(L, B) instead of (B, L)", "batch_first=False"),
])
def test_a_convention_of_other_libraries_is_named_as_such(fn, mistake, convention):
    result = assert_named("pad_batch", fn, mistake)
    assert convention in result.details


WRONG_ANSWERS = [("broadcast_shape", bs_names_the_shapes_only), ("broadcast_shape", bs_zero_as_one),
                 ("build_vocab", vocab_specials_put_into_the_sentences), ("encode", encode_hard_coded_bos_eos),
                 ("decode", decode_angle_brackets_are_special), ("decode", decode_strips_the_callers_padding),
                 ("pad_batch", pad_empty_batch_as_an_empty_tensor), ("pad_batch", pad_appends_to_the_callers_lists)]


@pytest.mark.parametrize("name, fn", WRONG_ANSWERS, ids=[fn.__name__ for _, fn in WRONG_ANSWERS])
def test_diagnoses_are_short_and_print_no_whole_vocab(name, fn):
    text = str(check(name, fn))
    assert len(text.splitlines()) <= 8, text
    assert max(len(line) for line in text.splitlines()) <= 200, text
    assert "'<pad>': 0, '<bos>': 1" not in text, text   # a vocab is described, not dumped
