"""The one widget pattern of tfmlib.viz, checked on every notebook's explorer.

Each explorer shows its figure as PNG frames in an ipywidgets.Image of the
frame's pixel size (no Output widget, nothing printed), redraws through
`update(...)`, and a frame drawn from a cached background looks like a full
draw of the same figure.
"""
import io
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from PIL import Image  # noqa: E402

widgets = pytest.importorskip("ipywidgets")

import tfmlib as T  # noqa: E402
from tfmlib.training import ModelConfig, init_model  # noqa: E402
from tfmlib.viz import adam, attention, embeddings, encoder_decoder, masks, multihead  # noqa: E402
from tfmlib.viz import shapes, sublayers, tokenization, training  # noqa: E402
from tfmlib.viz.common import DPI, Explorer, Frames  # noqa: E402

SENTENCES = ["the cat sat on the mat", "i love nlp", "attention is all you need"]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)


def _differing_pixels(a: bytes, b: bytes) -> int:
    a, b = _pixels(a), _pixels(b)
    assert a.shape == b.shape
    return int((np.abs(a - b).max(-1) > 0).sum())


# ---- Frames -------------------------------------------------------------------------------------

def _line_figure():
    fig = Figure(figsize=(4, 3))
    ax = fig.add_subplot()
    ax.set_xlim(0, 10)
    ax.set_ylim(-1, 1)
    ax.set_title("a title drawn once, in the background")
    (line,) = ax.plot([], [], lw=2)
    return fig, line


def test_frames_from_a_cached_background_equal_a_full_draw():
    fig, line = _line_figure()
    frames = Frames(fig, moving=[line])
    assert frames.size == (4 * DPI, 3 * DPI)
    line.set_data([0, 10], [-1, 1])
    first = frames.png()                      # draws the background
    line.set_data([0, 10], [1, -1])
    blitted = frames.png()                    # pastes it back, paints the line
    assert blitted != first
    assert blitted == Frames(fig).png()       # no moving artists: a full draw


def test_a_moving_title_is_placed_as_a_full_draw_places_it():
    fig, line = _line_figure()
    title = fig.axes[0].title
    frames = Frames(fig, moving=[line, title])       # the title moves: drawn over the background
    title.set_text("a longer title\non two lines")
    line.set_data([0, 10], [0, 1])
    assert frames.png(background="new") == Frames(fig).png()


def test_a_strip_of_a_second_background_replaces_the_first_right_of_a_pixel_column():
    fig, line = _line_figure()
    frames = Frames(fig, moving=[line])
    ax = fig.axes[0]
    for colour in ("white", "black"):
        ax.set_facecolor(colour)
        frames.draw_background(colour)
    pixels = _pixels(frames.png("white", strip=("black", 200)))        # (300, 400, 3)
    assert pixels[150, 100].tolist() == [255, 255, 255]                 # inside the axes, left
    assert pixels[150, 199].tolist() == [255, 255, 255]
    assert pixels[150, 200].tolist() == [0, 0, 0]                       # from column 200 on
    assert pixels[150, 300].tolist() == [0, 0, 0]


def test_frames_keep_one_background_per_key_and_only_the_latest_few():
    fig, line = _line_figure()
    frames = Frames(fig, moving=[line])
    for key in range(Frames.MAX_BACKGROUNDS + 3):
        fig.axes[0].set_title(f"layout {key}")
        frames.png(background=key)
    assert len(frames.backgrounds) == Frames.MAX_BACKGROUNDS
    assert list(frames.backgrounds)[-1] == Frames.MAX_BACKGROUNDS + 2


# ---- every explorer -------------------------------------------------------------------------

def _running_example():
    vocab = T.build_vocab(SENTENCES)
    ids = T.encode_batch(SENTENCES, vocab, add_bos=True, add_eos=True)           # (3, 8)
    x = multihead.running_example_input(ids, len(vocab), 16)                     # (3, 8, 16)
    tokens = [[T.invert_vocab(vocab)[i] for i in row] for row in ids.tolist()]
    return ids, vocab, x, tokens


def _explorer_01():
    return shapes.broadcast_explorer(a="3, 1", b="4"), {"a": "2, 3, 4", "b": "3, 4"}


def _explorer_02():
    explorer = tokenization.tokenizer_explorer(SENTENCES, T.build_vocab(SENTENCES))
    return explorer, {"sentence": "the dog sat"}


def _explorer_03():
    return embeddings.positional_encoding_explorer(), {"pos_i": 3, "pos_j": 30}


def _explorer_04():
    return masks.mask_explorer([8, 5, 7], seq_len=8), {"lengths": [3, 2, 1], "causal": False}


def _explorer_05():
    ids, vocab, x, tokens = _running_example()
    sweep = attention.saturation_sweep(x, T.padding_mask(ids, vocab[T.PAD])[:, 0], draws=2)
    return attention.saturation_explorer(sweep, tokens[0]), {"d_k": 256, "scaled": False}


def _explorer_06():
    ids, vocab, _, _ = _running_example()
    return multihead.heads_explorer(ids, vocab), {"heads": 8, "d_k": 2}


def _explorer_07():
    _, _, x, _ = _running_example()
    ffn = T.init_ffn_params(16, 64, generator=torch.Generator().manual_seed(2))
    explorer = sublayers.block_explorer(x, lambda h: T.feed_forward(h, ffn), T.init_norm_params(16))
    return explorer, {"p": 0.5, "norm_first": True}


def _explorer_08():
    ids, vocab, x, tokens = _running_example()
    g = torch.Generator().manual_seed(0)
    stack = encoder_decoder.StackAttention(
        x, T.padding_mask(ids, 0), x, T.target_mask(ids, 0),
        encoder_layers=[T.init_encoder_layer_params(16, 32, generator=g) for _ in range(2)],
        decoder_layers=[T.init_decoder_layer_params(16, 32, generator=g) for _ in range(2)],
        sample_names=SENTENCES, src_tokens=tokens, tgt_tokens=tokens)
    return encoder_decoder.StackAttentionExplorer(stack), {"layers": 1, "heads": 2, "sample": 2}


def _explorer_09():
    return adam.OptimizerPathExplorer(), {"lr": 0.5, "beta2": 0.9}


def _explorer_10():
    config = ModelConfig(d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=12)
    params = init_model(config, torch.Generator().manual_seed(0))
    return training.ReverseExplorer(params, config, ["3 1 4", "2 7 1 8"]), {"text": "9 8", "head": "1"}


EXPLORERS = [_explorer_01, _explorer_02, _explorer_03, _explorer_04, _explorer_05, _explorer_06,
             _explorer_07, _explorer_08, _explorer_09, _explorer_10]


def _descendants(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from _descendants(child)


@pytest.mark.parametrize("build", EXPLORERS, ids=lambda build: build.__name__[-2:])
def test_explorer_follows_the_widget_pattern(build):
    explorer, change = build()
    assert isinstance(explorer, Explorer)
    shown = list(_descendants(explorer.widget))
    assert explorer.picture in shown and explorer.widget.children[-1] is explorer.picture
    assert not any(isinstance(w, widgets.Output) for w in shown)    # nothing printed or cleared
    # The Image is exactly the frame's size: the browser shows the PNG 1:1, never stretched.
    width, height = explorer.frames.size
    assert (int(explorer.picture.width), int(explorer.picture.height)) == (width, height)
    assert explorer.frames.fig.dpi == DPI

    before = explorer.png()
    assert before == explorer.picture.value and before[:4] == b"\x89PNG"
    assert Image.open(io.BytesIO(before)).size == (width, height)
    explorer.update(**change)
    after = explorer.png()
    # A frame may change its size (08's canvas follows the layers shown): the Image follows it.
    width, height = explorer.frames.size
    assert (int(explorer.picture.width), int(explorer.picture.height)) == (width, height)
    assert after != before and Image.open(io.BytesIO(after)).size == (width, height)
    assert math.isfinite(explorer.last_redraw_ms) and explorer.last_redraw_ms > 0
    # The static picture after a widget (for viewers without widgets) is the frame on screen.
    assert explorer.snapshot().data == after

    # Painting only the moving artists over a cached background must look like a full draw
    # by the same renderer (a text cache included; a few pixels may differ where a tick mark
    # touches an image's edge).
    explorer.frames.canvas.draw()
    assert _differing_pixels(after, explorer.frames.encode()) <= 100
