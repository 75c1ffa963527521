"""Notebook 10's experiments lab: the model's switches, the shuffle test, the regressor, the runner."""
import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from tfmlib import experiments as lab
from tfmlib import training
from tfmlib.training import (FIRST_DIGIT_ID, PAD_ID, VOCAB, ModelConfig, attention_layers,
                             attention_maps, decode_target, encode_source, forward,
                             greedy_decode, init_model, make_batch, shift_right)

SMALL = ModelConfig(d_model=12, num_heads=3, d_ff=20, num_layers=2, max_len=12)


def padded_batch(seed=0, count=5):
    """A source batch of 2 to 6 digits (so with padding) and its target."""
    return make_batch("reverse", count, 2, 6, False, torch.Generator().manual_seed(seed))


def pytorch_positions(length, d_model):
    """The sinusoidal table written with torch alone: sin on even columns, cos on odd ones."""
    position = torch.arange(length, dtype=torch.float64)[:, None]
    frequency = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table.float()


# ---- the model's switches ---------------------------------------------------------------------

def test_defaults_leave_the_model_as_it_was():
    params = init_model(SMALL, torch.Generator().manual_seed(0))
    assert attention_layers(params, "encoder", SMALL) is params["encoder"]
    assert attention_layers(params, "decoder", SMALL) is params["decoder"]
    assert "positional" not in repr(SMALL) and "scale_scores" not in repr(SMALL)


def test_positional_switch_adds_the_sinusoids_or_nothing():
    params = init_model(SMALL, torch.Generator().manual_seed(1))
    src, _ = padded_batch()
    tokens = F.embedding(src, params["embedding"]) * math.sqrt(SMALL.d_model)
    with_positions = training.embed_with_positions(params, src, SMALL)
    without = training.embed_with_positions(params, src, dataclasses.replace(SMALL, positional=False))
    torch.testing.assert_close(with_positions, tokens + pytorch_positions(src.size(1), SMALL.d_model))
    torch.testing.assert_close(without, tokens)


def test_no_positions_is_order_blind_and_positions_are_not():
    """Shuffle each source's digits: without positions the decoder's logits stay the same
    (up to the order of float sums) and so do the greedy answers; with them they change."""
    src, tgt = padded_batch(seed=2, count=7)
    shuffled = lab.shuffle_digits(src, torch.Generator().manual_seed(3))
    assert not torch.equal(shuffled, src)
    tgt_in, _ = shift_right(tgt)
    for positional in (False, True):
        config = dataclasses.replace(SMALL, positional=positional)
        params = init_model(config, torch.Generator().manual_seed(4))
        with torch.no_grad():
            before = forward(params, src, tgt_in, config)
            after = forward(params, shuffled, tgt_in, config)
        if positional:
            assert (before - after).abs().max() > 1e-2
        else:
            torch.testing.assert_close(after, before, rtol=0, atol=1e-5)
            assert torch.equal(greedy_decode(params, shuffled, config, 8),
                               greedy_decode(params, src, config, 8))


def test_shuffle_digits_permutes_each_row_and_keeps_the_padding():
    src, _ = padded_batch(seed=5, count=9)
    shuffled = lab.shuffle_digits(src, torch.Generator().manual_seed(0))
    assert torch.equal(shuffled == PAD_ID, src == PAD_ID)
    for a, b in zip(src, shuffled):
        assert sorted(a.tolist()) == sorted(b.tolist())
    assert not torch.equal(shuffled, src)
    with pytest.raises(ValueError, match="src"):
        lab.shuffle_digits(src[0], torch.Generator())


def unscaled_weights(x, attn, num_heads, mask, scale):
    """Self-attention weights in plain PyTorch: softmax((x Wq^T + bq)(x Wk^T + bk)^T * scale)."""
    batch, length, d_model = x.shape
    q = F.linear(x, attn["w_q"], attn["b_q"]).view(batch, length, num_heads, -1).transpose(1, 2)
    k = F.linear(x, attn["w_k"], attn["b_k"]).view(batch, length, num_heads, -1).transpose(1, 2)
    scores = (q @ k.transpose(-2, -1)) * scale
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)


@pytest.mark.parametrize("scale_scores", [True, False])
def test_scale_switch_matches_pytorch_attention_with_and_without_sqrt_dk(scale_scores):
    config = dataclasses.replace(SMALL, scale_scores=scale_scores, d_model=16, num_heads=2)
    params = init_model(config, torch.Generator().manual_seed(6))
    src, tgt = padded_batch(seed=7)
    tgt_in, _ = shift_right(tgt)
    maps = attention_maps(params, src, tgt_in, config)
    x = training.embed_with_positions(params, src, config)
    layer = params["encoder"][0]
    h = F.layer_norm(x, (16,), layer["norm1"]["gamma"], layer["norm1"]["beta"])   # Pre-LN input
    d_k = 16 // 2
    expected = unscaled_weights(h, layer["self_attn"], 2, (src != PAD_ID)[:, None, None, :],
                                1 / math.sqrt(d_k) if scale_scores else 1.0)
    torch.testing.assert_close(maps["encoder"][0], expected)


def test_no_scaling_trains_the_same_leaf_tensors():
    """The unscaled model's query weights are used times sqrt(d_k): by the chain rule their
    gradient is sqrt(d_k) times that of a scaled model holding the multiplied weights."""
    config = dataclasses.replace(SMALL, scale_scores=False)
    params = init_model(config, torch.Generator().manual_seed(8))
    src, tgt = padded_batch(seed=9)
    tgt_in, labels = shift_right(tgt)
    training.sequence_loss(forward(params, src, tgt_in, config), labels).backward()

    factor = math.sqrt(SMALL.d_model // SMALL.num_heads)
    scaled = init_model(SMALL, torch.Generator().manual_seed(8))
    with torch.no_grad():
        for layer in scaled["encoder"] + scaled["decoder"]:
            for attn in (layer[k] for k in ("self_attn", "cross_attn") if k in layer):
                attn["w_q"].mul_(factor)
                attn["b_q"].mul_(factor)
    training.sequence_loss(forward(scaled, src, tgt_in, SMALL), labels).backward()
    for stack in ("encoder", "decoder"):
        for ours, theirs in zip(params[stack], scaled[stack]):
            torch.testing.assert_close(ours["self_attn"]["w_q"].grad,
                                       factor * theirs["self_attn"]["w_q"].grad)
            torch.testing.assert_close(ours["self_attn"]["w_k"].grad, theirs["self_attn"]["w_k"].grad)
    assert all(w.grad is not None for w in training.parameters(params))


# ---- train's options ----------------------------------------------------------------------------

def first_batch_loss(config, seed, smoothing, **batch):
    """The first training step's loss as train computes it, rebuilt with F.cross_entropy."""
    generator = torch.Generator().manual_seed(seed)
    params = init_model(config, generator)
    src, tgt = make_batch("reverse", batch["batch_size"], batch["min_len"], batch["max_len"],
                          False, generator)
    tgt_in, labels = shift_right(tgt)
    logits = forward(params, src, tgt_in, config, training=True)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                           ignore_index=PAD_ID, label_smoothing=smoothing).item()


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_train_label_smoothing_is_pytorchs(smoothing):
    batch = dict(batch_size=6, min_len=2, max_len=5)
    _, history = training.train(SMALL, steps=1, seed=3, eval_size=4, label_smoothing=smoothing,
                                **batch)
    assert history["loss"][0] == pytest.approx(first_batch_loss(SMALL, 3, smoothing, **batch), rel=1e-6)


def test_train_warmup_switch_sets_the_first_learning_rates(monkeypatch):
    seen = []
    real = training.adam_step
    monkeypatch.setattr(training, "adam_step",
                        lambda weights, state, lr: seen.append(lr) or real(weights, state, lr=lr))
    for warmup in (True, False):
        training.train(SMALL, steps=20, batch_size=4, lr=0.5, eval_every=100, eval_size=2,
                       warmup=warmup)
    with_warmup, without = seen[:20], seen[20:]
    assert with_warmup[:2] == pytest.approx([0.25, 0.5])          # 2 warm-up steps of 20
    assert without[0] == 0.5 and without[1] < 0.5                 # at the peak, then decaying
    assert with_warmup[-1] == pytest.approx(0.05) and without[-1] == pytest.approx(0.05)  # 10 % of lr


def test_smoothed_loss_floor_is_the_best_a_model_can_do():
    vocab, smoothing = 14, 0.1
    target = torch.full((vocab,), smoothing / vocab)
    target[3] += 1 - smoothing
    best = F.cross_entropy(target.log()[None], torch.tensor([3]), label_smoothing=smoothing)
    worse = F.cross_entropy(torch.zeros(1, vocab).index_fill(1, torch.tensor([3]), 9.0),
                            torch.tensor([3]), label_smoothing=smoothing)
    assert lab.smoothed_loss_floor(smoothing, vocab) == pytest.approx(best.item(), rel=1e-6)
    assert worse.item() > best.item()


# ---- the regressor ------------------------------------------------------------------------------

def test_masked_mean_ignores_padding():
    src, _ = padded_batch(seed=11)
    hidden = torch.randn(*src.shape, 7, generator=torch.Generator().manual_seed(0))
    noisy = hidden.masked_fill((src == PAD_ID)[..., None], 1e3)    # change only the pads' vectors
    pooled = lab.masked_mean(hidden, src)
    torch.testing.assert_close(lab.masked_mean(noisy, src), pooled)
    for row, ids, mean in zip(hidden, src, pooled):
        torch.testing.assert_close(mean, row[ids != PAD_ID].mean(dim=0))


def test_regressor_equals_a_pytorch_rebuild():
    config = dataclasses.replace(SMALL, num_layers=1)
    params = lab.init_regressor(config, torch.Generator().manual_seed(12))
    src, _ = padded_batch(seed=13, count=6)
    d, heads = config.d_model, config.num_heads

    layer = torch.nn.TransformerEncoderLayer(d, heads, config.d_ff, dropout=0.0, batch_first=True,
                                             norm_first=True)
    ours = params["encoder"][0]
    with torch.no_grad():
        attn = ours["self_attn"]
        layer.self_attn.in_proj_weight.copy_(torch.cat([attn["w_q"], attn["w_k"], attn["w_v"]]))
        layer.self_attn.in_proj_bias.copy_(torch.cat([attn["b_q"], attn["b_k"], attn["b_v"]]))
        layer.self_attn.out_proj.weight.copy_(attn["w_o"])
        layer.self_attn.out_proj.bias.copy_(attn["b_o"])
        layer.linear1.weight.copy_(ours["ffn"]["w_1"])
        layer.linear1.bias.copy_(ours["ffn"]["b_1"])
        layer.linear2.weight.copy_(ours["ffn"]["w_2"])
        layer.linear2.bias.copy_(ours["ffn"]["b_2"])
        for norm, name in ((layer.norm1, "norm1"), (layer.norm2, "norm2")):
            norm.weight.copy_(ours[name]["gamma"])
            norm.bias.copy_(ours[name]["beta"])
    layer.train()  # dropout is 0; training mode keeps PyTorch off its fused fast path

    x = F.embedding(src, params["embedding"]) * math.sqrt(d) + pytorch_positions(src.size(1), d)
    hidden = layer(x, src_key_padding_mask=src == PAD_ID)
    hidden = F.layer_norm(hidden, (d,), params["encoder_norm"]["gamma"], params["encoder_norm"]["beta"])
    keep = (src != PAD_ID).float()[..., None]
    pooled = (hidden * keep).sum(1) / keep.sum(1)
    expected = lab.SUM_UNIT * F.linear(pooled, params["head_weight"], params["head_bias"]).squeeze(-1)
    torch.testing.assert_close(lab.regress(params, src, config), expected)


def test_regress_names_bad_inputs():
    config = dataclasses.replace(SMALL, num_layers=1)
    params = lab.init_regressor(config)
    src, _ = padded_batch()
    with pytest.raises(ValueError, match="head_weight"):
        lab.regress({k: v for k, v in params.items() if k != "head_weight"}, src, config)
    with pytest.raises(ValueError, match="src"):
        lab.regress(params, src[0], config)
    with pytest.raises(ValueError, match="max_len"):
        lab.regress(params, torch.full((2, 13), FIRST_DIGIT_ID), config)


def test_digit_sums_ignore_padding():
    src, _ = padded_batch(seed=14, count=8)
    expected = [sum(i - FIRST_DIGIT_ID for i in row.tolist() if i != PAD_ID) for row in src]
    assert lab.digit_sums(src).tolist() == expected


def test_train_regressor_learns_something_and_refuses_other_tasks():
    config = dataclasses.replace(lab.LAB_CONFIG)
    options = {**lab.LAB_TRAINING, "task": "sum", "steps": 30, "eval_every": 30}
    _, history = lab.train_regressor(config, seed=0, **options)
    assert sum(history["loss"][-5:]) / 5 < history["loss"][0] / 4
    assert history["eval_step"] == [30] and 0 <= history["exact_match"][0] <= 1
    with pytest.raises(ValueError, match="task"):
        lab.train_regressor(config, seed=0, **{**options, "task": "reverse"})


# ---- the experiments and the runner -------------------------------------------------------------

def test_each_experiment_changes_only_what_it_declares():
    base_config, base_training = dataclasses.asdict(lab.LAB_CONFIG), lab.LAB_TRAINING
    for name, experiment in lab.EXPERIMENTS.items():
        config = dataclasses.asdict(experiment.model_config())
        options = experiment.train_options()
        changed = {k for k in config if config[k] != base_config[k]}
        changed |= {k for k in options if options[k] != base_training[k]}
        assert changed == {k for k, _ in experiment.config + experiment.training}, name
    assert lab.EXPERIMENTS["baseline"].changes() == "(the baseline)"
    assert lab.EXPERIMENTS["lr x10"].train_options()["lr"] == pytest.approx(10 * lab.LAB_TRAINING["lr"])


def test_unknown_experiment_is_named():
    with pytest.raises(ValueError, match="no such thing"):
        lab.run_all(["baseline", "no such thing"], seeds=(0,), workers=1)


def test_parallel_runs_equal_serial_runs():
    """Two spawned workers and one process give the same records, bit for bit."""
    names = ["sum, no positions", "sum, regressor"]
    parallel = lab.run_all(names, seeds=(1,), workers=2)
    serial = lab.run_all(names, seeds=(1,), workers=1)
    assert parallel == serial
    record = serial["sum, no positions", 1]
    assert record["unchanged_by_shuffle"] == 1.0               # order-blind: no answer changed
    assert len(record["loss"]) == lab.LAB_TRAINING["steps"]
    assert record["eval_step"][-1] == lab.LAB_TRAINING["steps"]


def test_started_runs_train_while_this_process_works_and_equal_serial_runs():
    """start() hands the runs to workers and returns; notebook 10 trains its own model meanwhile."""
    runs = lab.start(["sum, regressor"], seeds=(0, 1), workers=2)
    here = lab.run("sum, regressor", 1)                       # this process is free meanwhile
    records = runs.results()
    assert records == lab.run_all(["sum, regressor"], seeds=(0, 1), workers=1)
    assert records["sum, regressor", 1] == here


def test_summary_and_table():
    record = {"name": "x", "seed": 0, "step": list(range(1, 31)), "loss": [3.0] * 20 + [1.0] * 10,
              "eval_step": [30], "exact_match": [0.25]}
    assert lab.summary(record) == {"exact_match": 0.25, "early_loss": 3.0, "loss": 1.0}
    text = lab.table({("x", 0): record}, ["x"])
    assert "25%" in text and "1.00" in text and text.splitlines()[1].startswith("x")
