"""Notebooks 04 and 05: the mask and attention widgets, built headlessly.

Each widget is built outside a kernel, its redraw callback is called with
non-default values, and the plotted data must change to the right values.
"""
import math

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

pytest.importorskip("ipywidgets")

from tfmlib import (PAD, add_positional_encoding, build_vocab, causal_mask,  # noqa: E402
                    embed, encode_batch, invert_vocab, padding_mask,
                    scaled_dot_product_attention, sinusoidal_positional_encoding, target_mask)
from tfmlib.viz import attention as viz_attention  # noqa: E402
from tfmlib.viz import masks as viz_masks  # noqa: E402
from tfmlib.viz.lint import assert_readable  # noqa: E402

SENTENCES = ["the cat sat on the mat", "i love nlp", "attention is all you need"]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def example():
    """The running example of notebook 05: ids (3, 8), x (3, 8, 16), mask (3, 1, 8)."""
    vocab = build_vocab(SENTENCES)
    ids = encode_batch(SENTENCES, vocab, add_bos=True, add_eos=True)
    table = torch.randn(len(vocab), 16, generator=torch.Generator().manual_seed(0)) / 4
    x = add_positional_encoding(embed(ids, table), sinusoidal_positional_encoding(8, 16))
    id_to_token = invert_vocab(vocab)
    tokens = [[id_to_token[i] for i in row] for row in ids.tolist()]
    mask = padding_mask(ids, vocab[PAD])[:, 0]                       # (B, 1, L)
    return {"ids": ids, "vocab": vocab, "x": x, "tokens": tokens, "mask": mask}


@pytest.fixture(scope="module")
def sweep(example):
    return viz_attention.saturation_sweep(example["x"], example["mask"], draws=4)


# ---- notebook 04: masks ----------------------------------------------------------------------

def test_masks_from_lengths_match_tfmlib(example):
    ids, pad_id = example["ids"], example["vocab"][PAD]
    lengths = (ids != pad_id).sum(1).tolist()                        # [8, 5, 7]
    combined = viz_masks.masks_from_lengths(lengths, 8, causal=True)
    assert torch.equal(combined, target_mask(ids, pad_id))
    padding_only = viz_masks.masks_from_lengths(lengths, 8, causal=False)
    assert torch.equal(padding_only, padding_mask(ids, pad_id).expand(3, 1, 8, 8))


def test_mask_explorer_update_redraws_the_grids(example):
    explorer = viz_masks.MaskExplorer([8, 5, 7], 8)
    before = [np.array(image.get_array()) for image in explorer.panels.images]
    first_png = explorer.png()
    assert explorer.masks.shape == (3, 1, 8, 8)

    explorer.update(lengths=[3, 2, 1], causal=False)

    after = [np.array(image.get_array()) for image in explorer.panels.images]
    for b, length in enumerate([3, 2, 1]):
        assert not np.array_equal(before[b], after[b])
        expected = np.zeros((8, 8))
        expected[:, :length] = 1                    # padding only: every row the same
        np.testing.assert_array_equal(after[b], expected)
    assert [s.value for s in explorer.sliders] == [3, 2, 1]
    assert explorer.causal_box.value is False
    assert "positions 3..7 are <pad>" in explorer.caption.value.replace("&lt;", "<").replace(
        "&gt;", ">")
    assert explorer.png() != first_png
    assert explorer.last_redraw_ms > 0


def test_mask_explorer_causal_switch_and_controls(example):
    explorer = viz_masks.MaskExplorer([8, 5, 7], 8, causal=False)
    explorer.causal_box.value = True               # what a click in the notebook does
    np.testing.assert_array_equal(np.array(explorer.panels.images[0].get_array()),
                                  np.tril(np.ones((8, 8))))
    explorer.sliders[1].value = 2                  # what dragging a slider does
    assert explorer.masks[1, 0].sum(-1).tolist() == [1, 2, 2, 2, 2, 2, 2, 2]
    with pytest.raises(ValueError, match="lengths"):
        explorer.update(lengths=[9, 1, 1])


def test_static_mask_figures(example):
    tokens, ids, pad_id = example["tokens"], example["ids"], example["vocab"][PAD]
    fig = viz_masks.plot_masks(padding_mask(ids, pad_id), tokens)
    image_axes = [ax for ax in fig.axes if ax.images and ax.get_xlabel()]
    assert len(image_axes) == 3
    sample_1 = np.array(image_axes[1].images[0].get_array())
    assert sample_1.shape == (8, 8) and sample_1[:, 5:].sum() == 0 and sample_1[:, :5].all()
    assert [t.get_text() for t in image_axes[1].get_xticklabels()] == tokens[1]

    wrong = {"ok": target_mask(ids, pad_id),
             "off by one": padding_mask(ids, pad_id) & causal_mask(8).tril(-1)}
    fig = viz_masks.plot_mask_variants(wrong, tokens[1], sample=1)
    assert fig.axes[1].get_title() == "off by one"
    assert [t.get_text() for t in fig.axes[1].texts] == ["keys", "0", "1", "2", "3", "4", "5", "5", "5"]  # noqa: E501

    assert "combined (3, 1, 8, 8)" in viz_masks.describe_setting([8, 5, 7], 8, causal=True)


# ---- notebook 05: attention ------------------------------------------------------------------

def test_row_entropy_bits():
    uniform = torch.full((2, 4), 0.25)
    one_hot = torch.tensor([[0.0, 1.0, 0.0, 0.0]])
    torch.testing.assert_close(viz_attention.row_entropy_bits(uniform), torch.full((2,), 2.0))
    torch.testing.assert_close(viz_attention.row_entropy_bits(one_hot), torch.zeros(1))


def test_attention_at_uses_the_notebook_recipe(example):
    x, mask = example["x"], example["mask"]
    w_q, w_k = viz_attention.projections(16, 8, seed=1)
    _, expected = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_k, mask)
    torch.testing.assert_close(viz_attention.attention_at(x, mask, 8, True)[0], expected)
    raw = (x @ w_q) @ (x @ w_k).transpose(-2, -1)                     # not divided by sqrt(8)
    unscaled = torch.softmax(raw.masked_fill(~mask, float("-inf")), dim=-1)
    torch.testing.assert_close(viz_attention.attention_at(x, mask, 8, False)[0], unscaled)


def test_sweep_shows_saturation_only_without_scaling(sweep):
    scaled, unscaled = sweep["scaled"], sweep["unscaled"]
    assert unscaled["max_weight"][-1] > 0.85 and unscaled["entropy"][-1] < 0.5
    assert max(scaled["max_weight"]) < 0.6 and min(scaled["entropy"]) > 1.8
    assert sweep["uniform_bits"] == pytest.approx(
        (8 * 3 + 5 * math.log2(5) + 7 * math.log2(7)) / 20)


def test_saturation_explorer_update_redraws(sweep, example):
    explorer = viz_attention.SaturationExplorer(sweep, example["tokens"][0])
    image, max_marker, entropy_marker = explorer.panels.changing_artists
    before = np.array(image.get_array())
    first_png = explorer.png()
    assert list(max_marker.get_xdata()) == [16]

    explorer.update(d_k=256, scaled=False)

    after = np.array(image.get_array())
    assert not np.array_equal(before, after)
    np.testing.assert_allclose(after, sweep["weights"][(256, False)][0].numpy())
    i = sweep["d_k"].index(256)
    assert list(max_marker.get_xdata()) == [256]
    assert list(max_marker.get_ydata()) == [sweep["unscaled"]["max_weight"][i]]
    assert list(entropy_marker.get_ydata()) == [sweep["unscaled"]["entropy"][i]]
    assert explorer.d_k_slider.value == 256 and explorer.scaled_box.value is False
    assert "not scaled" in explorer.caption.value
    assert explorer.png() != first_png

    explorer.scaled_box.value = True               # what a click in the notebook does
    np.testing.assert_allclose(np.array(image.get_array()),
                               sweep["weights"][(256, True)][0].numpy())
    with pytest.raises(ValueError, match="d_k"):
        explorer.update(d_k=100)


def test_static_attention_figures(sweep, example):
    weights = sweep["weights"][(16, True)]
    fig = viz_attention.attention_heatmaps(weights, example["tokens"])
    panels = [ax for ax in fig.axes if ax.images and ax.get_xlabel()]
    assert len(panels) == 3
    np.testing.assert_allclose(np.array(panels[2].images[0].get_array()), weights[2].numpy())
    assert [t.get_text() for t in panels[2].get_yticklabels()] == example["tokens"][2]

    fig = viz_attention.plot_saturation(sweep)
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) >= 2

    assert "d_k = 64, scores not scaled" in viz_attention.describe_setting(sweep, d_k=64, scaled=False)


# ---- every widget state passes the figure lint --------------------------------------------------

def test_mask_explorer_frames_pass_the_lint():
    explorer = viz_masks.mask_explorer([8, 5, 7], seq_len=8)
    for lengths, causal in [([8, 5, 7], True), ([1, 1, 1], True), ([8, 8, 8], False), ([3, 2, 1], False)]:
        explorer.update(lengths=lengths, causal=causal)
        assert_readable(explorer, f"mask explorer at {lengths}, causal={causal}")


@pytest.mark.parametrize("sample", [0, 1])
def test_saturation_explorer_frames_pass_the_lint(sweep, example, sample):
    explorer = viz_attention.saturation_explorer(sweep, example["tokens"][sample], sample=sample)
    for d_k in (2, 16, 512):
        for scaled in (True, False):
            explorer.update(d_k=d_k, scaled=scaled)
            assert_readable(explorer, f"saturation explorer, sample {sample}, d_k={d_k}, scaled={scaled}")


def test_the_padded_keys_of_sample_1_are_drawn_masked_not_as_zero(sweep, example):
    explorer = viz_attention.saturation_explorer(sweep, example["tokens"][1], sample=1)
    shown = explorer.panels.image.get_array()
    assert shown.mask[:, 5:].all() and not shown.mask[:, :5].any()   # "i love nlp": 5 real tokens
