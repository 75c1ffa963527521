"""The concept diagrams (tfmlib/viz/concepts.py): each passes the figure lint, and the shapes
and tokens it writes are the ones the library computes for the running example, so that a
diagram and the code beside it in the notebook agree.
"""
from __future__ import annotations

import math
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from tfmlib import (LMConfig, add_positional_encoding, build_vocab, cached_self_attention,  # noqa: E402
                    embed, encode_batch, init_lm_params, init_mha_params, multi_head_attention,
                    padding_mask, scaled_dot_product_attention, sinusoidal_positional_encoding,
                    split_heads)
from tfmlib.training import VOCAB, make_batch, shift_right  # noqa: E402
from tfmlib.tokenization import invert_vocab  # noqa: E402
from tfmlib.viz import concepts  # noqa: E402
from tfmlib.viz.lint import assert_readable, lint_figure  # noqa: E402
from tfmlib.viz.style import HIGHLIGHT_COLOUR  # noqa: E402

SENTENCES = ["the cat sat on the mat", "i love nlp", "attention is all you need"]
DIAGRAMS = {
    "course_map": concepts.course_map, "encoder_decoder_layers": concepts.encoder_decoder_layers,
    "encoder_decoder_stacks": concepts.encoder_decoder_stacks, "ln_placement": concepts.ln_placement,
    "architectures": concepts.architectures, "head_split": concepts.head_split,
    "shift_right": concepts.shift_right, "kv_cache": concepts.kv_cache,
    "rotation_clock": concepts.rotation_clock,
}


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def example():
    """The running example of notebooks 05-08, computed by the library: ids, x, the padding
    mask, one head's weights and four heads' weights."""
    vocab = build_vocab(SENTENCES)
    ids = encode_batch(SENTENCES, vocab, add_bos=True, add_eos=True)
    d_model = 16
    table = torch.randn(len(vocab), d_model, generator=torch.Generator().manual_seed(0)) / math.sqrt(d_model)
    x = add_positional_encoding(embed(ids, table), sinusoidal_positional_encoding(ids.size(1), d_model))
    mask = padding_mask(ids, vocab["<pad>"])
    _, weights = scaled_dot_product_attention(x, x, x, mask[:, 0])
    params = init_mha_params(d_model, generator=torch.Generator().manual_seed(1))
    _, head_weights = multi_head_attention(x, x, x, params, num_heads=4, mask=mask)
    y = torch.randn(3, 7, d_model)                        # notebook 08's targets: Lt = 7
    _, cross = multi_head_attention(y, x, x, params, num_heads=4, mask=mask)
    return {"ids": ids, "x": x, "mask": mask, "weights": weights, "heads": head_weights,
            "y": y, "cross": cross}


def _texts(fig) -> list[str]:
    return [text.get_text() for text in fig.findobj(matplotlib.text.Text) if text.get_text().strip()]


def _joined(fig) -> str:
    return "\n".join(_texts(fig))


@pytest.mark.parametrize("name", sorted(DIAGRAMS))
def test_every_diagram_passes_the_figure_lint(name):
    assert_readable(DIAGRAMS[name](), name)


@pytest.mark.parametrize("notebook", sorted(concepts.COURSE_HIGHLIGHTS))
def test_every_notebooks_map_passes_the_lint_and_marks_its_own_step(notebook):
    fig = concepts.course_map(notebook)
    assert_readable(fig, f"course_map({notebook!r})")
    marked, _ = concepts.COURSE_HIGHLIGHTS[notebook]
    thick = [patch for patch in fig.axes[0].patches
             if matplotlib.colors.to_hex(patch.get_edgecolor()) == HIGHLIGHT_COLOUR.lower()]
    assert len(thick) == len(marked)
    bold = {text.get_text() for text in fig.axes[0].texts if text.get_fontweight() == "bold"}
    for key in marked:
        assert any(name.startswith(key + " ·") for name in bold), (notebook, key, bold)
    if notebook[0] == "0" and notebook != "01":
        assert notebook in _texts(fig)[0] or any(t.startswith(f"You are at {notebook}") for t in _texts(fig))


def test_the_map_of_01_marks_every_shape_and_refuses_an_unknown_notebook():
    bold = {t.get_text() for t in concepts.course_map("01").axes[0].texts if t.get_fontweight() == "bold"}
    assert {shape for _, _, shape in concepts.COURSE_STEPS} <= bold
    with pytest.raises(ValueError, match="highlight.*'11'"):
        concepts.course_map("11")


def test_the_maps_shapes_are_the_running_examples(example):
    text = _joined(concepts.course_map("05"))
    assert f"ids {tuple(example['ids'].shape)}" in text
    assert f"x {tuple(example['x'].shape)}" in text
    assert f"mask {tuple(example['mask'].shape)}" in text
    assert f"weights {tuple(example['weights'].shape)}" in text
    assert f"weights {tuple(example['heads'].shape)}" in text


def test_the_layers_diagram_writes_the_shapes_of_notebook_08(example):
    text = _joined(concepts.encoder_decoder_layers())
    assert f"x {tuple(example['x'].shape)}" in text
    assert f"y {tuple(example['y'].shape)}" in text
    assert f"memory {tuple(example['x'].shape)}" in text
    assert f"cross-attention {tuple(example['cross'].shape)}" in text       # (B, H, Lt, Ls)
    assert f"padding {tuple(example['mask'].shape)}" in text
    assert "causal & padding (3, 1, 7, 7)" in text


def test_the_stacks_send_the_memory_to_every_decoder_layer():
    for n in (1, 2, 3):
        fig = concepts.encoder_decoder_stacks(n)
        ax = fig.axes[0]
        decoders = [t for t in ax.texts if t.get_text().startswith("decoder layer")]
        assert len(decoders) == n
        # one arrow ends at the left edge of each decoder layer's box, at its height
        ends = {round(a.xy[1], 3) for a in ax.texts if isinstance(a, matplotlib.text.Annotation)
                and a.arrow_patch.get_linewidth() > 1.5}
        assert {round(t.get_position()[1], 3) for t in decoders} <= ends
    with pytest.raises(ValueError, match="num_layers"):
        concepts.encoder_decoder_stacks(0)


def test_post_ln_normalises_after_the_add_and_pre_ln_before_the_sublayer():
    ax = concepts.ln_placement().axes[0]
    boxes = sorted((t.get_position() for t in ax.texts if t.get_text() in ("LayerNorm", "sublayer", "+")),
                   key=lambda p: (p[0] > 4.2, p[1]))
    names = {t.get_position(): t.get_text() for t in ax.texts}
    post, pre = [names[p] for p in boxes[:3]], [names[p] for p in boxes[3:]]
    assert post == ["sublayer", "+", "LayerNorm"]
    assert pre == ["LayerNorm", "sublayer", "+"]


def test_head_split_right_is_split_heads_and_wrong_mixes_tokens():
    tokens = torch.arange(8).repeat_interleave(16).reshape(1, 8, 16)
    assert np.array_equal(concepts.head_tokens("right"), split_heads(tokens, 4)[0].numpy())
    wrong = concepts.head_tokens("wrong")
    assert set(wrong[0].ravel()) == {0, 1}                  # head 0 holds two tokens only
    assert not np.array_equal(wrong, concepts.head_tokens("right"))
    with pytest.raises(ValueError, match="reshape"):
        concepts.head_tokens("sideways")


def test_head_split_draws_the_numbers_of_both_reshapes():
    fig = concepts.head_split()
    digits = [int(t.get_text()) for t in fig.axes[0].texts if t.get_text().isdigit()]
    right, wrong = concepts.head_tokens("right"), concepts.head_tokens("wrong")
    # x[0] row by row, then the right heads, then the wrong heads, each head row by row
    expected = list(np.repeat(np.arange(8), 16))
    for heads in (right, wrong):
        for h in range(4):
            expected += list(heads[h].ravel())
    assert digits == expected
    assert "(3, 8, 16) → (3, 8, 4, 4) → (3, 4, 8, 4)" in _joined(fig)


def test_shift_right_draws_what_the_training_code_feeds_and_predicts():
    _, tgt = make_batch("reverse", 4, 3, 8, held_out=False, generator=torch.Generator().manual_seed(5))
    id_to_token = invert_vocab(VOCAB)
    tgt_in, labels = shift_right(tgt)
    sample = [id_to_token[i] for i in tgt[0].tolist()]
    assert tuple(sample) == concepts.SHIFT_EXAMPLE        # notebook 10's sample 0
    ax = concepts.shift_right().axes[0]
    rows = {}
    for t in ax.texts:
        if t.get_text() in sample:
            rows.setdefault(round(t.get_position()[1], 2), []).append((t.get_position()[0], t.get_text()))
    drawn = [[token for _, token in sorted(row)] for _, row in sorted(rows.items(), reverse=True)]
    assert drawn[0] == sample
    assert drawn[1] == [id_to_token[i] for i in labels[0].tolist()]
    assert drawn[2] == [id_to_token[i] for i in tgt_in[0].tolist()]
    assert f"({tgt.size(0)}, {tgt_in.size(1)})" in _joined(concepts.shift_right())


def test_kv_cache_writes_the_shapes_cached_self_attention_returns():
    config = LMConfig(vocab_size=22, d_model=32, num_heads=4, d_ff=128, num_layers=2, max_len=32)
    attention = init_lm_params(config, torch.Generator().manual_seed(0))["blocks"][0]["attention"]
    x = torch.randn(1, 5, 32)
    _, cache = cached_self_attention(x[:, :4], attention, 4)
    before = tuple(cache["key"].shape)
    _, cache = cached_self_attention(x[:, 4:], attention, 4, cache)
    text = _joined(concepts.kv_cache(4))
    assert f"{before} → {tuple(cache['key'].shape)}" in text
    assert "scores (1, 4, 1, 5)" in text
    assert len(re.findall(r"^k[₀-₉]", text, flags=re.M)) == 5


def test_the_clock_hand_points_are_the_positional_tables_columns():
    fig = concepts.rotation_clock(p=2, k=3, pairs=(0, 2))
    pe = sinusoidal_positional_encoding(8, 16)
    for ax, i in zip(fig.axes[:2], (0, 2)):
        dots = [line for line in ax.lines if line.get_marker() == "o"][0]
        x, y = dots.get_data()
        assert np.allclose(x, pe[:, 2 * i].numpy(), atol=1e-6)
        assert np.allclose(y, pe[:, 2 * i + 1].numpy(), atol=1e-6)
    assert "turned 3·ω = 3 rad" in _joined(fig)


def test_a_box_too_small_for_its_text_is_caught_by_the_lint():
    fig, ax = concepts._canvas(1.0)
    concepts._box(ax, 1.0, 0.5, 0.6, 0.3, "a label much wider than its box")
    assert any("text outside its box" in p for p in lint_figure(fig))
