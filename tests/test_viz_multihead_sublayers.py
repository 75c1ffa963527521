"""Widgets of notebooks 06 (heads explorer) and 07 (LayerNorm explorer), driven headlessly.

Each test builds the widget without a browser or kernel, calls its redraw
callback with values other than the defaults, and checks that the data behind
the plot changed (and that it is the data the notebook's own code computes).
"""
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("ipywidgets")

import tfmlib as T  # noqa: E402
from tfmlib.viz import multihead as mh_viz  # noqa: E402
from tfmlib.viz import style  # noqa: E402
from tfmlib.viz import sublayers as sl_viz  # noqa: E402
from tfmlib.viz.lint import assert_readable  # noqa: E402

SENTENCES = ["the cat sat on the mat", "i love nlp", "attention is all you need"]


@pytest.fixture(scope="module")
def example():
    vocab = T.build_vocab(SENTENCES)
    ids = T.encode_batch(SENTENCES, vocab, add_bos=True, add_eos=True)  # (3, 8)
    return ids, vocab


@pytest.fixture(scope="module")
def heads(example):
    ids, vocab = example
    return mh_viz.heads_explorer(ids, vocab)


@pytest.fixture(scope="module")
def block_explorer(example):
    ids, vocab = example
    x = mh_viz.running_example_input(ids, len(vocab), 16)                  # (3, 8, 16)
    ffn = T.init_ffn_params(16, 64, generator=torch.Generator().manual_seed(2))
    return sl_viz.block_explorer(x, lambda h: T.feed_forward(h, ffn), T.init_norm_params(16))


@pytest.fixture
def block(block_explorer):
    """The explorer, back at its default setting (Post-LN, p = 0.1)."""
    block_explorer.update(p=0.1, norm_first=False)
    return block_explorer


# ---- notebook 06: heads explorer ---------------------------------------------------------------

def test_heads_explorer_default_is_the_notebook_computation(example, heads):
    ids, vocab = example
    heads.update(heads=4, d_k=4)
    # Notebook 06's own cells: the running example's table, then seeded projections.
    d_model = 16
    g = torch.Generator().manual_seed(0)
    table = torch.randn(len(vocab), d_model, generator=g) / math.sqrt(d_model)
    x = T.add_positional_encoding(T.embed(ids, table),
                                  T.sinusoidal_positional_encoding(ids.size(1), d_model))
    torch.testing.assert_close(mh_viz.running_example_input(ids, len(vocab), d_model), x)
    params = T.init_mha_params(d_model, generator=torch.Generator().manual_seed(1))
    _, weights = T.multi_head_attention(x, x, x, params, 4, T.padding_mask(ids, vocab["<pad>"]))
    torch.testing.assert_close(heads.weights, weights[0])
    assert heads.grid.image.get_array().shape == (2 * 8 + 2, 2 * 8 + 1, 4)  # 2 x 2 RGBA tiles


def test_heads_explorer_titles_every_tile(heads):
    heads.update(heads=8, d_k=2)
    labels = [label.get_text() for label in heads.grid.head_labels if label.get_visible()]
    assert labels == [f"head {h}" for h in range(8)]
    # The gaps between tiles (where the titles of the second row stand) are transparent,
    # so painting the image over the cached titles does not hide them.
    rgba = heads.grid.image.get_array()
    assert (rgba[8:10, :, 3] == 0).all() and (rgba[:, 8, 3] == 0).all()


def test_heads_explorer_update_changes_the_image(heads):
    heads.update(heads=4, d_k=4)
    image_before = np.array(heads.grid.image.get_array())
    png_before = heads.png()
    heads.update(heads=8, d_k=2)
    image_after = np.array(heads.grid.image.get_array())
    assert image_after.shape == (2 * 8 + 2, 4 * 8 + 3, 4)  # 2 x 4 tiles
    assert image_after.shape != image_before.shape
    assert heads.weights.shape == (8, 8, 8)
    torch.testing.assert_close(heads.weights.sum(-1), torch.ones(8, 8))
    assert heads.title.get_text().startswith("heads = 8, d_k = 2  ->  d_model = 8 x 2 = 16\n")
    assert (heads.heads_box.value, heads.d_k_box.value) == (8, 2)
    assert heads.png() != png_before


def test_heads_explorer_d_k_alone_changes_numbers_not_layout(heads):
    heads.update(heads=2, d_k=8)
    before = heads.weights.clone()
    heads.update(d_k=16)                           # d_model 16 -> 32, still 2 heads
    assert heads.weights.shape == before.shape
    assert not torch.allclose(heads.weights, before)
    assert "d_model = 2 x 16 = 32" in heads.title.get_text()


def test_heads_explorer_control_change_redraws(heads):
    heads.update(heads=4, d_k=4)
    heads.heads_box.value = 1                      # as a click would: through the observer
    assert heads.weights.shape == (1, 8, 8)
    assert heads.grid.image.get_array().shape == (8, 8, 4)


def test_heads_explorer_offers_only_valid_choices(heads):
    for h in heads.heads_box.options:
        for d_k in heads.d_k_box.options:
            assert (h * d_k) % h == 0              # d_model = heads x d_k always splits evenly
    with pytest.raises(Exception):                 # traitlets.TraitError: 3 is not offered
        heads.update(heads=3)


def test_tile_heads_places_each_head_in_its_tile():
    weights = torch.arange(8.0)[:, None, None].expand(8, 3, 3)  # head h is all h
    canvas = mh_viz.tile_heads(weights)
    assert canvas.shape == (2 * 3 + 2, 4 * 3 + 3)
    assert canvas[0, 0] == 0 and canvas[0, 4] == 1 and canvas[5, 12] == 7
    assert np.isnan(canvas[3, 0]) and np.isnan(canvas[0, 3])  # the gaps


def test_plot_heads_static_figure(example, heads):
    heads.update(heads=4, d_k=4)
    fig = mh_viz.plot_heads(heads.weights, heads.tokens, title="default")
    image = fig.axes[0].images[0].get_array()
    np.testing.assert_allclose(image, mh_viz.tile_colours(mh_viz.tile_heads(heads.weights)))
    assert_readable(fig, "plot_heads")
    plt.close(fig)


def test_heads_explorer_is_readable_in_every_state(heads):
    for h in mh_viz.HEAD_CHOICES:
        for d_k in mh_viz.D_K_CHOICES:
            heads.update(heads=h, d_k=d_k)
            assert_readable(heads, f"heads explorer, heads={h}, d_k={d_k}")


def test_heads_explorer_scale_is_0_to_1_and_padded_keys_are_grey(example):
    ids, vocab = example
    explorer = mh_viz.heads_explorer(ids, vocab, sample=1)    # "i love nlp": 3 padded keys
    explorer.update(heads=2, d_k=8)
    rgba = explorer.grid.image.get_array()                    # (8, 8 + 1 + 8, 4)
    grey = matplotlib.colors.to_rgba(style.MASKED_COLOUR)
    padded = [j for j, token in enumerate(explorer.tokens) if token == "<pad>"]
    assert padded == [5, 6, 7]
    for tile_left in (0, 9):
        for j in range(8):
            np.testing.assert_allclose(rgba[:, tile_left + j], [grey] * 8 if j in padded else
                                       style.ATTENTION_CMAP(explorer.weights[tile_left // 9, :, j].numpy()))
    bar = [a for a in explorer.fig.axes if a is not explorer.ax and a.get_ylim() == (0.0, 1.0)]
    assert bar, "a colour bar from 0 to 1"


# ---- notebook 07: LayerNorm explorer -----------------------------------------------------------

def _bars(explorer):
    return [step.get_data().values.copy() for step in explorer.steps]


def test_block_explorer_dropout_slider_changes_post_ln_histograms(block):
    before, png_before = _bars(block), block.png()
    block.update(p=0.6)
    after = _bars(block)
    assert block.p_slider.value == 0.6
    assert not np.allclose(before[0], after[0])   # LayerNorm input: x + Dropout(FFN(x))
    assert block.summary.startswith("Post-LN, dropout p = 0.60")
    assert block.png() != png_before


def test_block_explorer_toggle_switches_to_pre_ln(block):
    before = _bars(block)
    block.update(norm_first=True)
    after = _bars(block)
    assert block.mode.value is True
    assert block.summary.startswith("Pre-LN")
    assert not np.allclose(before[2], after[2])    # block output is no longer normalised
    np.testing.assert_allclose(after[0], sl_viz.fractions(block.x))  # LayerNorm sees x itself


def test_block_explorer_control_change_redraws(block):
    block.mode.value = True                        # as a click would: through the observer
    assert block.summary.startswith("Pre-LN")
    before = _bars(block)
    block.p_slider.value = 0.9
    assert not np.allclose(before[2], _bars(block)[2])


def test_block_stages_follow_residual_sublayer(block):
    post = sl_viz.block_stages(block.x, block.sublayer, block.norm, 0.3, norm_first=False)
    torch.testing.assert_close(post["block output"], post["LayerNorm output"])
    per_token = post["block output"].std(dim=-1, unbiased=False)
    torch.testing.assert_close(per_token, torch.ones_like(per_token), atol=1e-3, rtol=0)
    pre = sl_viz.block_stages(block.x, block.sublayer, block.norm, 0.3, norm_first=True)
    torch.testing.assert_close(pre["LayerNorm input"], block.x)
    expected = T.residual_sublayer(block.x, block.sublayer, block.norm, norm_first=True,
                                   dropout_p=0.3, training=True,
                                   generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(pre["block output"], expected)


def test_summary_never_prints_negative_zero():
    assert "-0.000" not in sl_viz.summary(torch.tensor([[[-1e-6, 1e-6]]]), 0.0, False)


def test_block_explorer_is_readable_in_every_mode(block):
    for norm_first in (False, True):
        for p in (0.0, 0.45, 0.9):
            block.update(p=p, norm_first=norm_first)
            assert_readable(block, f"block explorer, p={p}, norm_first={norm_first}")


def test_block_explorer_default_frame(block):
    assert_readable(block, "block explorer at its default setting")
    assert len(block.fig.axes) == 3
    assert block.fig._suptitle.get_text().startswith("Post-LN, dropout p = 0.10")
