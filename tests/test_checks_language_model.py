"""The checks of bonus notebook b1 (decoder_block, lm_forward, lm_loss) cannot be fooled.

Every answer below is written the way a learner would write it in a notebook cell:
  - wrong answers must FAIL, and be named where the catalogue has their mistake: the causal
    mask forgotten or built with triu, Post-LN, positions added after the blocks, the tied
    output layer transposed, targets not shifted, a softmax before cross_entropy;
  - correct but unusual answers must PASS: PyTorch's own scaled_dot_product_attention with
    is_causal, one head at a time, F.layer_norm, a one-hot matmul for the embedding lookup,
    a log_softmax + gather loss, the loss from the full forward pass's logits.
"""
import math

import pytest
import torch
import torch.nn.functional as F

from tfmlib import causal_mask, decoder_block, feed_forward, layer_norm, lm_forward, multi_head_attention
from tfmlib.exercises import REGISTRY, check

from random_cases import random_cases

EXERCISES = ("decoder_block", "lm_forward", "lm_loss")


def ln(x, norm):
    return F.layer_norm(x, x.shape[-1:], norm["gamma"], norm["beta"])


def ffn(x, p):
    return torch.relu(x @ p["w_1"].T + p["b_1"]) @ p["w_2"].T + p["b_2"]


def attention_sdpa(h, p, num_heads, mask):
    """PyTorch's scaled_dot_product_attention: is_causal when no mask is given, else the mask
    (its bool mask also means True = may attend)."""
    batch, length, d_model = h.shape

    def heads(w, b):
        return F.linear(h, w, b).view(batch, length, num_heads, d_model // num_heads).transpose(1, 2)

    out = F.scaled_dot_product_attention(heads(p["w_q"], p["b_q"]), heads(p["w_k"], p["b_k"]),
                                         heads(p["w_v"], p["b_v"]), attn_mask=mask,
                                         is_causal=mask is None)
    return F.linear(out.transpose(1, 2).reshape(batch, length, d_model), p["w_o"], p["b_o"])


def attention_head_loop(h, p, num_heads, mask):
    """One head at a time; the mask made by hand with torch.tril when none is given."""
    length, d_k = h.shape[1], h.shape[-1] // num_heads
    if mask is None:
        mask = torch.tril(torch.ones(length, length, dtype=torch.bool))
    mask = mask.expand(h.shape[0], 1, length, length)[:, 0]                      # (B, L, L)
    q, k, v = (h @ p["w_q"].T + p["b_q"], h @ p["w_k"].T + p["b_k"], h @ p["w_v"].T + p["b_v"])
    outputs = []
    for head in range(num_heads):
        cols = slice(head * d_k, (head + 1) * d_k)
        scores = q[..., cols] @ k[..., cols].transpose(-2, -1) / math.sqrt(d_k)
        scores = scores.masked_fill(~mask, float("-inf"))
        outputs.append(scores.softmax(dim=-1).nan_to_num(0.0) @ v[..., cols])  # no visible key: zeros
    return torch.cat(outputs, dim=-1) @ p["w_o"].T + p["b_o"]


# ---- decoder_block: correct answers ------------------------------------------------------------

def block_sdpa(x, block, num_heads, mask=None):
    x = x + attention_sdpa(ln(x, block["norm1"]), block["attention"], num_heads, mask)
    return x + ffn(ln(x, block["norm2"]), block["ffn"])


def block_head_loop(x, block, num_heads, mask=None):
    h = x + attention_head_loop(ln(x, block["norm1"]), block["attention"], num_heads, mask)
    return h + ffn(ln(h, block["norm2"]), block["ffn"])


def block_tfmlib_pieces_own_in_place(x, block, num_heads, mask=None):
    """tfmlib's pieces; in-place edits, but only of tensors the answer made itself."""
    if mask is None:
        mask = causal_mask(x.size(1))
    h = layer_norm(x, block["norm1"]["gamma"], block["norm1"]["beta"])
    out = multi_head_attention(h, h, h, block["attention"], num_heads, mask)[0]
    out += x
    update = feed_forward(layer_norm(out, block["norm2"]["gamma"], block["norm2"]["beta"]), block["ffn"])
    return update.add_(out)


# ---- decoder_block: wrong answers --------------------------------------------------------------

def block_no_causal_mask(x, block, num_heads, mask=None):
    h = ln(x, block["norm1"])
    x = x + multi_head_attention(h, h, h, block["attention"], num_heads, mask)[0]
    return x + ffn(ln(x, block["norm2"]), block["ffn"])


def block_triu(x, block, num_heads, mask=None):
    if mask is None:
        mask = torch.ones(x.size(1), x.size(1), dtype=torch.bool).triu()
    return block_head_loop(x, block, num_heads, mask)


def block_post_ln(x, block, num_heads, mask=None):
    h = ln(x + attention_sdpa(x, block["attention"], num_heads, mask), block["norm1"])
    return ln(h + ffn(h, block["ffn"]), block["norm2"])


def block_adds_normed(x, block, num_heads, mask=None):
    h = ln(x, block["norm1"])
    h = h + attention_sdpa(h, block["attention"], num_heads, mask)
    h2 = ln(h, block["norm2"])
    return h2 + ffn(h2, block["ffn"])


def block_always_causal(x, block, num_heads, mask=None):
    return block_sdpa(x, block, num_heads, None)


def block_adds_in_place(x, block, num_heads, mask=None):
    x += attention_sdpa(ln(x, block["norm1"]), block["attention"], num_heads, mask)
    return x + ffn(ln(x, block["norm2"]), block["ffn"])


def block_detached_ffn(x, block, num_heads, mask=None):
    x = x + attention_sdpa(ln(x, block["norm1"]), block["attention"], num_heads, mask)
    return x + ffn(ln(x, block["norm2"]), block["ffn"]).detach()


# ---- lm_forward: correct answers ---------------------------------------------------------------

def forward_one_hot(params, ids, config):
    """The lookup as a one-hot matmul, the output layer as F.linear, PyTorch's layer norm."""
    table = params["token_embedding"]
    one_hot = F.one_hot(ids, config.vocab_size).to(table.dtype)                   # (B, L, V)
    x = one_hot @ table * config.d_model ** 0.5 + params["position_embedding"][: ids.shape[1]]
    for block in params["blocks"]:
        x = block_sdpa(x, block, config.num_heads)
    return F.linear(ln(x, params["final_norm"]), table)


def forward_positions_by_arange(params, ids, config):
    positions = torch.arange(ids.shape[1])
    x = params["token_embedding"][ids] * math.sqrt(config.d_model) + params["position_embedding"][positions]
    for block in params["blocks"]:
        x = decoder_block(x, block, config.num_heads)
    return torch.einsum("bld,vd->blv", ln(x, params["final_norm"]), params["token_embedding"])


# ---- lm_forward: wrong answers -----------------------------------------------------------------

def forward_positions_after_blocks(params, ids, config):
    x = params["token_embedding"][ids] * math.sqrt(config.d_model)
    for block in params["blocks"]:
        x = decoder_block(x, block, config.num_heads)
    x = x + params["position_embedding"][: ids.shape[1]]
    return ln(x, params["final_norm"]) @ params["token_embedding"].T


def forward_transposed_tying(params, ids, config):
    x = params["token_embedding"][ids] * math.sqrt(config.d_model) + params["position_embedding"][: ids.shape[1]]
    for block in params["blocks"]:
        x = decoder_block(x, block, config.num_heads)
    return ln(x, params["final_norm"]) @ params["token_embedding"]


def forward_no_final_norm(params, ids, config):
    x = params["token_embedding"][ids] * math.sqrt(config.d_model) + params["position_embedding"][: ids.shape[1]]
    for block in params["blocks"]:
        x = block_sdpa(x, block, config.num_heads)
    return x @ params["token_embedding"].T


def forward_separate_output_copy(params, ids, config):
    """Not tied: the output layer reads a detached copy, so no gradient reaches the embedding
    from the output side."""
    x = params["token_embedding"][ids] * math.sqrt(config.d_model) + params["position_embedding"][: ids.shape[1]]
    for block in params["blocks"]:
        x = decoder_block(x, block, config.num_heads)
    return ln(x, params["final_norm"]) @ params["token_embedding"].detach().T


# ---- lm_loss: correct and wrong answers ----------------------------------------------------------

def loss_gather(params, ids, config):
    log_probs = lm_forward(params, ids[:, :-1], config).log_softmax(dim=-1)      # (B, L-1, V)
    return -log_probs.gather(-1, ids[:, 1:, None]).mean()


def loss_transposed_for_cross_entropy(params, ids, config):
    """cross_entropy with the classes on axis 1: (B, V, L-1) logits, (B, L-1) targets."""
    logits = lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits.transpose(1, 2), ids[:, 1:])


def loss_not_shifted(params, ids, config):
    logits = lm_forward(params, ids[:, :-1], config)
    return F.cross_entropy(logits.reshape(-1, config.vocab_size), ids[:, :-1].reshape(-1))


def loss_softmax_first(params, ids, config):
    probs = lm_forward(params, ids[:, :-1], config).softmax(-1)
    return F.cross_entropy(probs.flatten(0, 1), ids[:, 1:].flatten())


def loss_per_sequence_sum(params, ids, config):
    """Summed over positions, averaged over the batch: grows with the window."""
    log_probs = lm_forward(params, ids[:, :-1], config).log_softmax(dim=-1)
    return -log_probs.gather(-1, ids[:, 1:, None]).sum(dim=1).mean()


# ---- the tests ---------------------------------------------------------------------------------

CORRECT = [
    ("decoder_block", block_sdpa), ("decoder_block", block_head_loop),
    ("decoder_block", block_tfmlib_pieces_own_in_place),
    ("lm_forward", forward_one_hot), ("lm_forward", forward_positions_by_arange),
    ("lm_loss", loss_gather), ("lm_loss", loss_transposed_for_cross_entropy),
]

NAMED = [
    ("decoder_block", block_no_causal_mask, "causal mask forgotten"),
    ("decoder_block", block_triu, "causal mask upside down: the future is visible, the past hidden"),
    ("decoder_block", block_post_ln, "Post-LN instead of Pre-LN"),
    ("decoder_block", block_adds_normed, "the normalised input added back instead of x"),
    ("decoder_block", block_always_causal, "the given mask ignored: always causal"),
    ("decoder_block", block_adds_in_place, "residual added in place to the caller's x"),
    ("lm_forward", forward_positions_after_blocks, "positions added after the blocks"),
    ("lm_forward", forward_transposed_tying, "tied output layer transposed the wrong way"),
    ("lm_forward", forward_no_final_norm, "final LayerNorm forgotten"),
    ("lm_loss", loss_not_shifted, "targets not shifted: each position scored against its own token"),
    ("lm_loss", loss_softmax_first, "softmax applied before cross_entropy"),
]

# Wrong answers no catalogued mistake covers: diagnosed, with what the diagnosis must say.
DIAGNOSED = [
    ("decoder_block", block_detached_ffn, "the gradient reaching"),
    ("lm_forward", forward_separate_output_copy, "the gradient reaching `params['token_embedding']`"),
    ("lm_loss", loss_per_sequence_sum, "values differ"),
]


@pytest.mark.parametrize("name, answer", CORRECT, ids=[f.__name__ for _, f in CORRECT])
def test_correct_but_unusual_answers_pass(name, answer):
    result = check(name, answer)
    assert result.status == "passed", str(result)


@pytest.mark.parametrize("name, answer", CORRECT, ids=[f.__name__ for _, f in CORRECT])
def test_correct_answers_pass_on_the_random_cases_too(name, answer):
    """Every edge of the contract (one token, an empty batch, float64, V == D...) included."""
    result = check(name, answer, random_cases(name, 0) + random_cases(name, 1))
    assert result.status == "passed", str(result)


@pytest.mark.parametrize("name, answer, mistake", NAMED, ids=[f.__name__ for _, f, _ in NAMED])
def test_classic_mistakes_are_named(name, answer, mistake):
    result = check(name, answer)
    assert result.status == "mistake" and result.mistake == mistake, str(result)


@pytest.mark.parametrize("name, answer, says", DIAGNOSED, ids=[f.__name__ for _, f, _ in DIAGNOSED])
def test_other_wrong_answers_fail_with_a_diagnosis(name, answer, says):
    result = check(name, answer)
    assert result.status == "failed", str(result)
    assert says in str(result), str(result)


@pytest.mark.parametrize("name", EXERCISES)
def test_random_cases_cover_the_edges_of_the_contract(name):
    labels = " | ".join(case.label for seed in range(3) for case in random_cases(name, seed))
    edges = {"decoder_block": ("one token", "one head", "empty batch", "float64", "mask: all True",
                               "mask: default (None)", "mask: causal & padding", "mask: padding only"),
             "lm_forward": ("shortest", "full context", "empty batch", "vocab_size == d_model", "float64"),
             "lm_loss": ("shortest", "full context", "vocab_size == d_model", "float64")}[name]
    for edge in edges:
        assert edge in labels, edge


def test_the_check_cases_of_the_block_include_no_mask_and_masks_without_causal_part():
    """Else 'causal mask forgotten' or 'the given mask ignored' could pass."""
    labels = [case.label for case in REGISTRY["decoder_block"].make_cases()]
    for kind in ("mask: default (None)", "mask: all True", "mask: padding only"):
        assert any(kind in label for label in labels), kind


def test_the_loss_cases_read_a_whole_context():
    """Windows of max_len + 1: the reference reads max_len tokens, an unshifted answer cannot run."""
    cases = REGISTRY["lm_loss"].make_cases()
    assert any(case.args[1].shape[1] == case.args[2].max_len + 1 for case in cases)
