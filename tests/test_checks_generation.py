"""Checks of bonus notebook b2 (temperature, top-k, top-p, attention with a KV cache, lm_step),
judged on answers written the way a learner would write them in a notebook cell.

Correct answers written differently from tfmlib must PASS, on the exercise's cases and on its
random ones; every catalogued mistake (each of its variants) must FAIL and be named; other
wrong answers, written here independently, must FAIL; a stub reports "not attempted".
"""
import math

import pytest
import torch
import torch.nn.functional as F

from tfmlib import causal_mask, embed, feed_forward, layer_norm, scaled_dot_product_attention
from tfmlib.exercises import REGISTRY, check

from random_cases import random_cases

NAMES = ["next_token_probs", "top_k_filter", "top_p_filter", "cached_self_attention", "lm_step"]


# ---- correct answers, written differently ------------------------------------------------------

def probs_by_log_softmax(logits, temperature=1.0):
    return (logits / temperature).log_softmax(dim=-1).exp()


def probs_stable_by_hand(logits, temperature=1.0):
    scaled = logits / temperature
    shifted = torch.exp(scaled - scaled.amax(dim=-1, keepdim=True))
    return shifted / shifted.sum(dim=-1, keepdim=True)


def top_k_by_sorting(logits, k):
    kth = logits.sort(dim=-1, descending=True).values[..., min(k, logits.size(-1)) - 1]
    return torch.where(logits >= kth.unsqueeze(-1), logits, torch.full_like(logits, -math.inf))


def top_k_row_by_row(logits, k):
    rows = logits.reshape(-1, logits.size(-1)).clone()
    for row in rows:
        values = sorted(row.tolist(), reverse=True)
        row[row < values[min(k, len(values)) - 1]] = float("-inf")
    return rows.reshape(logits.shape)


def top_p_with_shifted_cumsum(logits, p):
    sorted_logits, _ = torch.sort(logits, dim=-1, descending=True)
    probs = F.softmax(sorted_logits, dim=-1)
    cumulative = probs.cumsum(dim=-1)
    before = cumulative - probs
    cutoff = torch.where(before < p, sorted_logits, torch.full_like(sorted_logits, math.inf))
    return logits.masked_fill(logits < cutoff.min(dim=-1, keepdim=True).values, float("-inf"))


def top_p_counting(logits, p):
    """How many tokens the nucleus needs, then top-k with that many (top-k keeps ties too)."""
    sorted_logits = logits.sort(dim=-1, descending=True).values
    probs = sorted_logits.softmax(dim=-1)
    count = ((probs.cumsum(dim=-1) - probs) < p).sum(dim=-1, keepdim=True)           # (..., 1)
    kth = sorted_logits.gather(-1, count - 1)
    return logits.masked_fill(logits < kth, -math.inf)


def cached_attention_with_library_mha(x, params, num_heads, cache=None):
    """Projections by hand with einsum, the mask from two aranges, one head at a time."""
    batch, new, d_model = x.shape
    d_k = d_model // num_heads

    def project(w, b):
        return (torch.einsum("bld,ed->ble", x, params[w]) + params[b]).reshape(
            batch, new, num_heads, d_k).permute(0, 2, 1, 3)

    q, k, v = project("w_q", "b_q"), project("w_k", "b_k"), project("w_v", "b_v")
    if cache is not None:
        k, v = torch.cat((cache["key"], k), dim=-2), torch.cat((cache["value"], v), dim=-2)
    past = k.size(2) - new
    allowed = torch.arange(k.size(2))[None, :] <= torch.arange(past, past + new)[:, None]
    heads = []
    for h in range(num_heads):
        scores = q[:, h] @ k[:, h].transpose(-2, -1) / math.sqrt(d_k)
        scores = scores.masked_fill(~allowed, float("-inf"))
        heads.append(scores.softmax(dim=-1) @ v[:, h])
    context = torch.cat(heads, dim=-1)                                   # (B, Ln, D)
    return context @ params["w_o"].T + params["b_o"], {"key": k, "value": v}


def lm_step_with_positions_tensor(params, ids, config, caches=None):
    past = 0 if caches is None else caches[0]["key"].shape[-2]
    positions = torch.arange(past, past + ids.shape[1])
    x = params["token_embedding"][ids] * math.sqrt(config.d_model) + params["position_embedding"][positions]
    new_caches = []
    for block, cache in zip(params["blocks"], caches or [None] * len(params["blocks"])):
        h = layer_norm(x, **block["norm1"])
        out, cache = cached_attention_with_library_mha(h, block["attention"], config.num_heads, cache)
        x = x + out
        x = x + feed_forward(layer_norm(x, **block["norm2"]), block["ffn"])
        new_caches.append(cache)
    return layer_norm(x, **params["final_norm"]) @ params["token_embedding"].T, new_caches


CORRECT = {
    "next_token_probs": [probs_by_log_softmax, probs_stable_by_hand],
    "top_k_filter": [top_k_by_sorting, top_k_row_by_row],
    "top_p_filter": [top_p_with_shifted_cumsum, top_p_counting],
    "cached_self_attention": [cached_attention_with_library_mha],
    "lm_step": [lm_step_with_positions_tensor],
}


@pytest.mark.parametrize("name, index", [(n, i) for n in NAMES for i in range(len(CORRECT[n]))])
def test_correct_answers_written_differently_pass(name, index):
    result = check(name, CORRECT[name][index])
    assert result.status == "passed", str(result)


@pytest.mark.parametrize("name, index", [(n, i) for n in NAMES for i in range(len(CORRECT[n]))])
def test_correct_answers_pass_on_the_random_cases_too(name, index):
    cases = [case for seed in range(3) for case in random_cases(name, seed)]
    result = check(name, CORRECT[name][index], cases)
    assert result.status == "passed", str(result)


@pytest.mark.parametrize("name", NAMES)
def test_the_reference_passes(name):
    assert check(name, REGISTRY[name].reference)


@pytest.mark.parametrize("name", NAMES)
def test_a_stub_is_not_attempted(name):
    def stub(*args):
        ...  # your code here
    assert check(name, stub).status == "not attempted"


# ---- every catalogued mistake is caught and named --------------------------------------------

@pytest.mark.parametrize("name, mistake, variant", [
    (name, mistake.name, index) for name in NAMES
    for mistake in REGISTRY[name].mistakes for index in range(len(mistake.variants))])
def test_every_catalogued_mistake_is_named(name, mistake, variant):
    answer = next(m for m in REGISTRY[name].mistakes if m.name == mistake).variants[variant]
    result = check(name, answer)
    assert result.status == "mistake" and result.mistake == mistake, str(result)


# ---- the classic mistakes, written in a learner's own words -----------------------------------

def w_temperature_after_softmax(logits, temperature):
    probs = F.softmax(logits, dim=-1)
    return probs / temperature


def w_temperature_renormalised(logits, temperature):
    probs = F.softmax(logits, dim=-1) / temperature
    return probs / probs.sum(dim=-1, keepdim=True)


def w_top_k_scatter(logits, k):
    _, idx = torch.topk(logits, min(k, logits.shape[-1]))
    out = torch.full_like(logits, float("-inf"))
    return out.scatter(-1, idx, logits.gather(-1, idx))


def w_top_k_zero(logits, k):
    kth = logits.topk(min(k, logits.size(-1))).values[..., -1:]
    return torch.where(logits >= kth, logits, torch.zeros_like(logits))


def w_top_p_too_few(logits, p):
    sorted_logits, order = logits.sort(descending=True)
    cumulative = sorted_logits.softmax(-1).cumsum(-1)
    drop_sorted = cumulative > p                       # drops the token that crosses p ...
    drop_sorted[..., 0] = False                        # ... but keeps the top one
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def w_top_p_hf_ties(logits, p):
    """Hugging Face's rule: right at the threshold, but ties at the cutoff are cut apart."""
    sorted_logits, order = torch.sort(logits, descending=False)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cumulative <= (1 - p)
    remove[..., -1:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), -math.inf)


def w_cache_on_heads_axis(x, params, num_heads, cache=None):
    from tfmlib import linear, merge_heads, split_heads
    q = split_heads(linear(x, params["w_q"], params["b_q"]), num_heads)
    k = split_heads(linear(x, params["w_k"], params["b_k"]), num_heads)
    v = split_heads(linear(x, params["w_v"], params["b_v"]), num_heads)
    if cache is not None:
        k = torch.cat([cache["key"], k], dim=1)
        v = torch.cat([cache["value"], v], dim=1)
    mask = causal_mask(k.size(2))[:, :, -x.size(1):]
    context, _ = scaled_dot_product_attention(q, k, v, mask)
    return linear(merge_heads(context), params["w_o"], params["b_o"]), {"key": k, "value": v}


def w_cache_without_mask(x, params, num_heads, cache=None):
    """Right for one new token at a time, but the prompt's tokens see their future."""
    from tfmlib import linear, merge_heads, split_heads
    heads = [split_heads(linear(x, params[f"w_{n}"], params[f"b_{n}"]), num_heads) for n in "qkv"]
    q, k, v = heads
    if cache:
        k, v = torch.cat([cache["key"], k], 2), torch.cat([cache["value"], v], 2)
    context = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)), dim=-1) @ v
    return linear(merge_heads(context), params["w_o"], params["b_o"]), {"key": k, "value": v}


def w_positions_from_zero(params, ids, config, caches=None):
    length = ids.size(1)
    x = embed(ids, params["token_embedding"]) + params["position_embedding"][:length]
    new_caches = []
    for i, block in enumerate(params["blocks"]):
        from tfmlib import cached_self_attention
        h = layer_norm(x, block["norm1"]["gamma"], block["norm1"]["beta"])
        out, cache = cached_self_attention(h, block["attention"], config.num_heads,
                                           caches[i] if caches else None)
        x = x + out
        x = x + feed_forward(layer_norm(x, block["norm2"]["gamma"], block["norm2"]["beta"]), block["ffn"])
        new_caches.append(cache)
    h = layer_norm(x, params["final_norm"]["gamma"], params["final_norm"]["beta"])
    return h @ params["token_embedding"].T, new_caches


@pytest.mark.parametrize("name, answer, named", [
    ("next_token_probs", w_temperature_after_softmax, "temperature applied after the softmax"),
    ("next_token_probs", w_temperature_renormalised, "temperature ignored"),
    ("top_k_filter", w_top_k_scatter, "ties at the k-th largest logit cut"),
    ("top_k_filter", w_top_k_zero, "0 instead of -inf"),
    ("top_p_filter", w_top_p_too_few, "one token too few"),
    ("top_p_filter", w_top_p_hf_ties, "ties at the cutoff cut apart"),
    ("cached_self_attention", w_cache_on_heads_axis, "wrong axis"),
    ("cached_self_attention", w_cache_without_mask, "causal mask forgotten"),
    ("lm_step", w_positions_from_zero, "positions restart at 0"),
])
def test_a_learners_version_of_a_classic_mistake_is_named(name, answer, named):
    result = check(name, answer)
    assert result.status == "mistake" and named in result.mistake, str(result)


def test_an_unknown_wrong_answer_fails_with_the_case_that_shows_it():
    def top_k_keeps_one_more(logits, k):
        return CORRECT["top_k_filter"][0](logits, k + 1)
    result = check("top_k_filter", top_k_keeps_one_more)
    assert result.status in ("failed", "mistake") and "case" in str(result), str(result)
