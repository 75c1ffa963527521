"""Notebook 10: the tiny encoder-decoder, its toy data, greedy decoding, and one real training run."""
import time

import torch
import torch.nn.functional as F

from tfmlib import adam_init, adam_step, training, zero_grad
from tfmlib.training import (BOS_ID, EOS_ID, FIRST_DIGIT_ID, PAD_ID, VOCAB, ModelConfig,
                             digits_to_ids, greedy_decode, init_model, is_held_out, make_batch,
                             random_digit_sequences, reverse_target, sequence_loss, shift_right,
                             sum_target)


def digits_of(ids):
    """Source ids -> the digit list, padding dropped."""
    return [i - FIRST_DIGIT_ID for i in ids.tolist() if i != PAD_ID]


def test_vocab_specials_first_then_digits():
    assert (PAD_ID, BOS_ID, EOS_ID) == (0, 1, 2)
    assert [VOCAB[str(d)] for d in range(10)] == list(range(FIRST_DIGIT_ID, FIRST_DIGIT_ID + 10))


def test_held_out_split_is_a_partition_and_the_training_data_never_touch_it():
    generator = torch.Generator().manual_seed(0)
    train = random_digit_sequences(600, 3, 8, held_out=False, generator=generator)
    held = random_digit_sequences(150, 3, 8, held_out=True, generator=generator)
    assert not any(is_held_out(s) for s in train)
    assert all(is_held_out(s) for s in held)
    assert not {tuple(s) for s in train} & {tuple(s) for s in held}
    # the split is a real one: about 10 % of all sequences are held out
    everything = [torch.randint(0, 10, (6,), generator=generator).tolist() for _ in range(3000)]
    share = sum(map(is_held_out, everything)) / len(everything)
    assert 0.07 < share < 0.13


def test_make_batch_reverse_layout():
    src, tgt = make_batch("reverse", 9, 3, 6, held_out=False, generator=torch.Generator().manual_seed(2))
    assert src.dtype == torch.long and tgt.dtype == torch.long
    assert src.size(0) == tgt.size(0) == 9 and tgt.size(1) == src.size(1) + 2
    for s, t in zip(src, tgt):
        digits = digits_of(s)
        assert 3 <= len(digits) <= 6 and not is_held_out(digits)
        answer = [FIRST_DIGIT_ID + d for d in digits[::-1]]
        assert t.tolist()[: len(answer) + 2] == [BOS_ID] + answer + [EOS_ID]
        assert all(i == PAD_ID for i in t.tolist()[len(answer) + 2:])


def test_make_batch_of_empty_sequences_is_still_a_long_tensor():
    src, tgt = make_batch("reverse", 2, 0, 0, held_out=True, generator=torch.Generator().manual_seed(0))
    assert src.dtype == tgt.dtype == torch.long
    assert src.shape == (2, 0) and tgt.tolist() == [[BOS_ID, EOS_ID]] * 2


def test_targets_and_shift_right():
    assert reverse_target([3, 1, 4]) == [4, 1, 3]
    assert sum_target([9, 8, 7]) == [2, 4]
    tgt = torch.tensor([[BOS_ID, 5, 6, EOS_ID], [BOS_ID, 7, EOS_ID, PAD_ID]])
    tgt_in, labels = shift_right(tgt)
    assert tgt_in.tolist() == [[BOS_ID, 5, 6], [BOS_ID, 7, EOS_ID]]
    assert labels.tolist() == [[5, 6, EOS_ID], [7, EOS_ID, PAD_ID]]


def test_sequence_loss_ignores_padding(gen):
    logits = torch.randn(2, 3, len(VOCAB), generator=gen, dtype=torch.float64)
    labels = torch.tensor([[5, 6, EOS_ID], [7, PAD_ID, PAD_ID]])
    picked = [(0, 0, 5), (0, 1, 6), (0, 2, EOS_ID), (1, 0, 7)]
    expected = torch.stack([-F.log_softmax(logits[b, t], -1)[c] for b, t, c in picked]).mean()
    torch.testing.assert_close(sequence_loss(logits, labels), expected)


def test_forward_shapes_and_parameters_are_leaves():
    config = ModelConfig(d_model=8, num_heads=2, d_ff=16, num_layers=1, max_len=12)
    params = init_model(config, torch.Generator().manual_seed(0))
    weights = training.parameters(params)
    assert all(p.is_leaf and p.requires_grad for p in weights)
    src, tgt = make_batch("reverse", 3, 2, 5, False, torch.Generator().manual_seed(1))
    tgt_in, _ = shift_right(tgt)
    logits = training.forward(params, src, tgt_in, config)
    assert logits.shape == (3, tgt_in.size(1), len(VOCAB))


def test_the_positional_table_is_built_once_per_model_size_and_never_trained(monkeypatch):
    built = []
    real = training.sinusoidal_positional_encoding
    monkeypatch.setattr(training, "sinusoidal_positional_encoding",
                        lambda *args, **kwargs: built.append(args) or real(*args, **kwargs))
    training._positional_table.cache_clear()
    config = ModelConfig(d_model=8, num_heads=2, d_ff=16, num_layers=1, max_len=12)
    params = init_model(config, torch.Generator().manual_seed(0))
    weights = training.parameters(params)
    state = adam_init(weights)
    src, tgt = make_batch("reverse", 4, 2, 5, False, torch.Generator().manual_seed(1))
    tgt_in, labels = shift_right(tgt)
    for _ in range(3):                                     # three training steps
        loss = sequence_loss(training.forward(params, src, tgt_in, config, training=True), labels)
        zero_grad(weights)
        loss.backward()
        adam_step(weights, state, lr=1e-2)
    greedy_decode(params, src, config, max_new_tokens=6)   # a decoder pass per new token
    training.attention_maps(params, src, tgt_in, config)
    assert len(built) == 1, f"the table was built {len(built)} times"

    table = training.positional_table(config.max_len, config.d_model)
    assert table.shape == (12, 8) and not table.requires_grad and table.grad is None
    torch.testing.assert_close(table, real(12, 8), rtol=0, atol=0)      # training left it alone
    assert not any(w is table for w in weights) and len(state["m"]) == len(weights)
    assert "positional" not in str(list(params))            # not among the model's params either

    other = ModelConfig(d_model=8, num_heads=2, d_ff=16, num_layers=1, max_len=20)
    training.forward(init_model(other), src, tgt_in, other)  # another size: its own table, once
    training.forward(init_model(other), src, tgt_in, other)
    assert len(built) == 2


def test_digits_to_ids():
    assert digits_to_ids("3 1 4").tolist() == [[FIRST_DIGIT_ID + 3, FIRST_DIGIT_ID + 1, FIRST_DIGIT_ID + 4]]
    assert torch.equal(digits_to_ids("314"), digits_to_ids("3 1 4"))


def test_greedy_decode_stops_at_eos_and_pads_after(monkeypatch):
    """A scripted decoder: row b says digits, then <eos> at step stop[b], then digits again."""
    config = ModelConfig(d_model=8, num_heads=2, d_ff=16, num_layers=1, max_len=12)
    params = init_model(config, torch.Generator().manual_seed(0))
    stop = [2, 4, 1]  # <eos> is the 2nd, 4th and 1st generated token

    def scripted(params, tgt_in, memory, src_mask, config, training=False):
        step = tgt_in.size(1)  # tokens so far, <bos> included: the next one is number `step`
        logits = torch.zeros(tgt_in.size(0), step, len(VOCAB))
        for row, last in enumerate(stop):
            logits[row, -1, EOS_ID if step == last else FIRST_DIGIT_ID + row] = 1.0
        return logits

    monkeypatch.setattr(training, "decode_target", scripted)
    src = torch.full((3, 4), FIRST_DIGIT_ID)
    out = greedy_decode(params, src, config, max_new_tokens=8)
    d0, d1, d2 = FIRST_DIGIT_ID, FIRST_DIGIT_ID + 1, FIRST_DIGIT_ID + 2
    assert out.tolist() == [[BOS_ID, d0, EOS_ID, PAD_ID, PAD_ID],
                            [BOS_ID, d1, d1, d1, EOS_ID],
                            [BOS_ID, EOS_ID, PAD_ID, PAD_ID, PAD_ID]]  # stops once all rows ended
    assert out.dtype == torch.long
    assert greedy_decode(params, src, config, max_new_tokens=2).size(1) == 3  # the cap holds


def test_training_learns_to_reverse_held_out_sequences():
    """The ONE real training run (~10 s): tfmlib model + hand-written Adam, trained on 3 to 10
    digits with train()'s defaults, the recipe of notebook 10."""
    start = time.perf_counter()
    params, history = training.train()
    seconds = time.perf_counter() - start
    print(f"training.train() (reverse, {history['step'][-1]} steps) took {seconds:.1f} s; "
          f"held-out exact match {history['exact_match']}")

    assert history["eval_step"][-1] == history["step"][-1]
    assert history["exact_match"][-1] >= 0.99  # notebook 10's claim: at least 99 % of 3-10 digits
    assert history["loss"][-1] < history["loss"][0] / 10

    # decode a few held-out sequences of the longest trained length ourselves: the reversed
    # digits, then <eos>, then padding
    config = ModelConfig()
    src, _ = make_batch("reverse", 8, 10, 10, held_out=True, generator=torch.Generator().manual_seed(99))
    out = greedy_decode(params, src, config, max_new_tokens=src.size(1) + 1)
    hits = 0
    for s, o in zip(src, out):
        o = o.tolist()
        assert o[0] == BOS_ID
        if EOS_ID in o:
            end = o.index(EOS_ID)
            assert all(i == PAD_ID for i in o[end + 1:])
            hits += o[1:end] == [FIRST_DIGIT_ID + d for d in digits_of(s)[::-1]]
    assert hits >= 7
