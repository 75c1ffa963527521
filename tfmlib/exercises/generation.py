"""Exercises of bonus notebook b2: temperature, top-k, top-p and attention with a KV cache.

How each check calls the learner's function:
    next_token_probs(logits, temperature)            -> probabilities (..., V)
    top_k_filter(logits, k)                          -> logits (..., V), -inf where dropped
    top_p_filter(logits, p)                          -> logits (..., V), -inf where dropped
    cached_self_attention(x, params, num_heads, cache) -> (output (B, Ln, D), {"key", "value"})
    lm_step(params, ids, config, caches)             -> (logits (B, Ln, V), one cache per block)

The filters are judged in the dtype they are given (not against a float64 reference): which
token crosses the threshold p is decided by the cumulative sum the answer itself computes.
Their cases hold ties (integer logits), a row that reaches p exactly, k > V and logits that an
earlier filter already set to -inf.
"""
from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from ..embeddings import embed
from ..generation import (cached_self_attention, lm_step, next_token_probs, top_k_filter, top_p_filter)
from ..language_model import LMConfig, init_lm_params
from ..masks import causal_mask
from ..multihead import linear, merge_heads, split_heads
from ..sublayers import feed_forward, layer_norm
from ..training import parameters
from .core import Case, Contract, Exercise, Mistake, register
from .multihead import random_mha_params

INF = float("inf")


def _random_logits(g, shape, dtype=torch.float32, integer=False, scale=2.0):
    """Logits of `shape`; `integer`: whole numbers from -3 to 3, so that rows hold ties."""
    if integer:
        return torch.randint(-3, 4, shape, generator=g).to(dtype)
    return (scale * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype)


# ---- next_token_probs: temperature ------------------------------------------------------------

def _temperature_cases() -> list[Case]:
    g = torch.Generator().manual_seed(140)
    return [
        # T = 20 on the case scaled by 100: softmax(logits) ** (1 / T) rounds to 0 what the reference keeps
        Case("(B, V) = (3, 7), T = 20: nearly uniform", (_random_logits(g, (3, 7)), 20.0)),
        Case("(V,) = (9,), T = 0.02: nearly greedy", (_random_logits(g, (9,)), 0.02)),
        Case("(B, L, V) = (2, 3, 5), T = 1: plain softmax", (_random_logits(g, (2, 3, 5)), 1.0)),
        Case("(V,) = (6,), T left at its default 1", (_random_logits(g, (6,)),)),
        Case("float64, (4, 6), T = 0.8", (_random_logits(g, (4, 6), torch.float64), 0.8)),
        Case("large logits (a confident model), T = 0.25",
             (torch.tensor([[300.0, 296.0, 200.0, -5.0], [0.0, 250.0, 248.0, 1.0]]), 0.25)),
        Case("a row with -inf logits, T = 3", (torch.tensor([[1.0, -INF, 0.5, -INF, -1.0]]), 3)),
    ]


def _exp_over_sum(logits, temperature):
    scaled = torch.exp(logits / temperature)
    return scaled / scaled.sum(dim=-1, keepdim=True)


register(Exercise(
    name="next_token_probs",
    contract=Contract(axes={"B": {"logits": (0,)}, "V": {"logits": (-1,)}},
                                         scales={"logits": (100.0,)}),
    reference=next_token_probs,
    make_cases=_temperature_cases,
    mistakes=[
        Mistake("temperature applied after the softmax",
                "divide the logits by the temperature, then take the softmax: softmax(logits / T); "
                "probabilities divided by T no longer sum to 1",
                lambda logits, temperature: torch.softmax(logits, dim=-1) / temperature,
                also=(lambda logits, temperature: torch.softmax(logits, dim=-1) ** (1 / temperature),)),
        Mistake("temperature ignored (or applied after the softmax and renormalised, where it cancels)",
                "softmax(logits / T): the temperature must change the logits before the softmax",
                lambda logits, temperature: torch.softmax(logits, dim=-1)),
        Mistake("probabilities raised to the power 1 / T and renormalised",
                "equal in exact arithmetic, not in floats: softmax(logits) rounds the small probabilities "
                "to 0 before the power can raise them; divide the logits, softmax(logits / T)",
                # exp(log(p) / T), p in float32 even in the engine's float64 run: its rounding is the mistake
                lambda logits, temperature=1.0: _exp_over_sum(
                    torch.softmax(logits.float(), dim=-1).log().to(logits.dtype), temperature)),
        Mistake("logits multiplied by the temperature",
                "divide: T < 1 must make the distribution sharper, T > 1 flatter",
                lambda logits, temperature: torch.softmax(logits * temperature, dim=-1)),
        Mistake("softmax over the wrong axis",
                "the V candidates are the last axis: softmax(..., dim=-1), so each row sums to 1",
                lambda logits, temperature: torch.softmax(logits / temperature, dim=0)),
        Mistake("softmax written as exp / sum: exp overflows",
                "for large logits (or a small T) exp gives inf and inf / inf = nan; torch.softmax "
                "subtracts each row's largest logit first",
                _exp_over_sum),
    ],
    nan_hint="exp of a large logit overflows to inf, and inf / inf = nan: use torch.softmax",
))


# ---- the filters: which tokens are dropped is compared exactly ----------------------------------

def _filter_run(fn, case: Case):
    """The filtered logits, and where they are -inf: the engine's tolerance grows with the
    expected value, so an -inf there would accept any number (0 or -1e9 instead of -inf)."""
    logits = fn(*case.args, **case.kwargs)
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        return logits  # reported as it is: None, a list, integer ids
    return logits, torch.isneginf(logits)


# ---- top_k_filter -----------------------------------------------------------------------------

def _top_k_cases() -> list[Case]:
    g = torch.Generator().manual_seed(141)
    return [
        Case("(B, V) = (3, 8), k = 3", (_random_logits(g, (3, 8)), 3)),
        Case("ties at the k-th largest: every tied token is kept",
             (torch.tensor([[3.0, 1.0, 2.0, 1.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0, 2.0, 2.0]]), 2)),
        Case("(V,) = (7,), k = 1: only the largest", (_random_logits(g, (7,)), 1)),
        Case("k = 9 > V = 5: every token kept", (_random_logits(g, (2, 5)), 9)),
        Case("(B, L, V) = (2, 3, 6), integer logits with ties, k = 4",
             (_random_logits(g, (2, 3, 6), integer=True), 4)),
        Case("float64, -inf from an earlier filter, k = 3",
             (torch.tensor([[0.5, -INF, 1.5, 0.2, -INF], [-INF, -INF, 0.0, -INF, 0.1]],
                           dtype=torch.float64), 3)),
    ]


def _exactly_k(logits, k):
    """torch.topk's indices scattered into a mask: ties at the k-th are cut arbitrarily."""
    keep_ids = logits.topk(min(k, logits.size(-1)), dim=-1).indices
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, keep_ids, True)
    return logits.masked_fill(~keep, -INF)


def _top_k_variant(compare="<", fill=-INF, largest=True, clamp=True):
    def variant(logits, k):
        kept_count = min(k, logits.size(-1)) if clamp else k
        kth = logits.topk(kept_count, dim=-1, largest=largest).values.narrow(-1, kept_count - 1, 1)
        drop = logits <= kth if compare == "<=" else (logits > kth if not largest else logits < kth)
        return logits.masked_fill(drop, fill)
    return variant


def _kth_of_whole_tensor(logits, k):
    kth = logits.flatten().topk(min(k, logits.numel())).values[-1]
    return logits.masked_fill(logits < kth, -INF)


register(Exercise(
    name="top_k_filter",
    contract=Contract(axes={"B": {"logits": (0,)}, "V": {"logits": (-1,)}},
                                     scales={"logits": (1000.0,)}),
    reference=top_k_filter,
    make_cases=_top_k_cases,
    float64_reference=False,
    run=_filter_run,
    output_names=("filtered logits", "which tokens are -inf"),
    mistakes=[
        Mistake("ties at the k-th largest logit cut: exactly k kept",
                "compare with the k-th largest value instead of keeping topk's k indices: "
                "logits < kth become -inf, and every token tied with the k-th stays",
                _exactly_k),
        Mistake("the k-th largest itself dropped: only k - 1 kept",
                "drop the logits strictly below the k-th largest (<), not those equal to it",
                _top_k_variant(compare="<=")),
        Mistake("the k smallest logits kept",
                "keep the k largest: topk(k) (largest=True) gives them, the k-th is values[..., -1]",
                _top_k_variant(largest=False)),
        Mistake("dropped logits set to 0 instead of -inf",
                "a logit of 0 still has probability after the softmax; -inf gives exactly 0",
                _top_k_variant(fill=0.0)),
        Mistake("dropped logits set to -1e9 instead of -inf",
                "-1e9 is a number, and the next filter or a temperature still treats it as one; "
                "use float('-inf'), whose softmax is exactly 0",
                _top_k_variant(fill=-1e9)),
        Mistake("k larger than V not clamped: topk raises",
                "a row has only V tokens: take min(k, V) of them (k >= V keeps every token)",
                _top_k_variant(clamp=False)),
        Mistake("the k-th largest of the whole tensor, not of each row",
                "each row is its own distribution: topk(k, dim=-1) and values[..., -1:] (keep the "
                "axis so it broadcasts against the row)",
                _kth_of_whole_tensor),
    ],
))


# ---- top_p_filter -----------------------------------------------------------------------------

def _exact_threshold_logits(dtype=torch.float32) -> torch.Tensor:
    """(2, 4) logits whose probabilities are exactly 0.5, 0.25, 0.125, 0.125 (row 0) and
    0.25, 0.5, 0.125, 0.125 (row 1): with p = 0.75 the first two tokens reach p exactly."""
    ln2 = math.log(2.0)
    return torch.tensor([[2 * ln2, ln2, 0.0, 0.0], [ln2, 2 * ln2, 0.0, 0.0]], dtype=dtype)


def _top_p_cases() -> list[Case]:
    g = torch.Generator().manual_seed(142)
    tail = -1e-4 * torch.arange(1500, dtype=torch.float64)
    return [
        Case("(B, V) = (3, 8), p = 0.9", (_random_logits(g, (3, 8)), 0.9)),
        Case("mass exactly p = 0.75 after two tokens: exactly those two", (_exact_threshold_logits(), 0.75)),
        Case("p = 0.5, reached exactly by the first token: it alone", (_exact_threshold_logits(), 0.5)),
        Case("p = 0.7, crossed by the second token: two kept", (_exact_threshold_logits(), 0.7)),
        Case("ties at the cutoff are kept together",
             (torch.tensor([[2.0, 1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]]), 0.6)),
        Case("p = 1: every token with any probability", (_random_logits(g, (2, 6)), 1.0)),
        Case("(B, L, V) = (2, 3, 7), float64, p = 0.3", (_random_logits(g, (2, 3, 7), torch.float64), 0.3)),
        Case("(V,) = (6,) with -inf from top-k, p = 0.95",
             (torch.tensor([1.0, -INF, 0.3, 2.0, -INF, 0.8]), 0.95)),
        # by hand: no contract variation shifts the logits, and no scale makes the largest large and close
        Case("logits near 100, the largest close together: exp(100) overflows, p = 0.9",
             (_random_logits(g, (2, 6)) + 100, 0.9)),
        # a step of the sum near p, 1.3e-4, is far above float32's rounding and under float16's resolution (4.9e-4)
        Case("a long tail: 0.8 on one token, 1500 of about 1.3e-4; p = 0.899946 lies between two sums",
             (torch.cat([(4 * tail.exp().sum()).log().reshape(1), tail]).float(), 0.899946)),
    ]


def _top_p_variant(rule="before < p", order="descending", mass="softmax", back="values",
                   fill=-INF, keep_top=False):
    """A top-p filter with one step changed; the reference is rule="before < p"."""
    def variant(logits, p):
        sorted_logits, indices = logits.sort(dim=-1, descending=order == "descending")
        if order == "vocabulary":
            sorted_logits = logits
        probs = torch.softmax(sorted_logits, dim=-1) if mass == "softmax" else sorted_logits
        cumulative = probs.cumsum(dim=-1)
        kept = {"before < p": cumulative - probs < p, "before <= p": cumulative - probs <= p,
                "cumulative < p": cumulative < p, "cumulative <= p": cumulative <= p}[rule]
        if keep_top:  # the most likely token kept whatever the rule says
            kept[..., 0] = True
        if back == "sorted":  # the kept logits left in sorted order
            return sorted_logits.masked_fill(~kept, fill)
        if back == "scatter":  # the sorted order's indices scattered back: ties cut apart
            return logits.masked_fill(~kept.scatter(-1, indices, kept), fill)
        smallest = sorted_logits.masked_fill(~kept, INF).amin(dim=-1, keepdim=True)
        return logits.masked_fill(logits < smallest, fill)
    return variant


def _hugging_face_top_p(logits, p):
    """TopPLogitsWarper's rule: sort ascending, drop the tokens whose cumulative probability is
    <= 1 - p, keep the most likely one; ties at the cutoff fall where the sort puts them."""
    sorted_logits, indices = logits.sort(dim=-1)
    remove = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1) <= 1 - p
    remove[..., -1] = False
    return logits.masked_fill(remove.scatter(-1, indices, remove), -INF)


register(Exercise(
    name="top_p_filter",
    contract=Contract(axes={"B": {"logits": (0,)}, "V": {"logits": (-1,)}},
                                     scales={"logits": (1000.0,)}),
    reference=top_p_filter,
    make_cases=_top_p_cases,
    float64_reference=False,
    run=_filter_run,
    output_names=("filtered logits", "which tokens are -inf"),
    mistakes=[
        Mistake("one token too few: the token that reaches p is dropped",
                "keep a token while the tokens BEFORE it hold less than p (cumsum - probs < p): the token "
                "that makes the mass reach p belongs to the set (a mask cumsum > p must move one place right)",
                _top_p_variant(rule="cumulative <= p", keep_top=True),
                also=tuple(_top_p_variant(rule=rule, keep_top=keep_top, back=back)
                           for rule in ("cumulative <= p", "cumulative < p")
                           for keep_top in (True, False) for back in ("values", "scatter"))[1:]),
        Mistake("one token too many when the mass reaches p exactly",
                "the set is the smallest one with mass >= p: once the tokens before hold exactly p, "
                "stop (mass before < p, not <= p)",
                _top_p_variant(rule="before <= p")),
        Mistake("cumulative sum taken in vocabulary order, not from the most likely token",
                "sort the logits (descending) before the cumulative sum: the nucleus is the most likely tokens",
                _top_p_variant(order="vocabulary")),
        Mistake("sorted in ascending order: the least likely tokens kept",
                "sort(descending=True): walk down from the most likely token",
                _top_p_variant(order="ascending")),
        Mistake("cumulative sum of the logits, not of the probabilities",
                "p is a probability mass: softmax the sorted logits, then cumsum",
                _top_p_variant(mass="logits")),
        Mistake("result left in sorted order",
                "the filter must return the logits in vocabulary order: find the smallest kept logit "
                "and drop the logits below it in the original tensor",
                _top_p_variant(back="sorted")),
        Mistake("dropped logits set to 0 instead of -inf",
                "a logit of 0 still has probability after the softmax; -inf gives exactly 0",
                _top_p_variant(fill=0.0)),
        Mistake("ties at the cutoff cut apart (the sorted indices scattered back)",
                "this course keeps ties together, as in top_k_filter: drop only the logits strictly "
                "below the smallest kept one, so the result does not depend on the order of ties",
                _top_p_variant(back="scatter"), also=(_hugging_face_top_p,)),
    ],
))


# ---- cached_self_attention --------------------------------------------------------------------

def _attention_case(label, g, batch, new, past, heads, d_k, dtype=torch.float32, repel=False):
    d_model = heads * d_k
    params = {k: v.to(dtype) for k, v in random_mha_params(d_model, g).items()}
    x = torch.randn(batch, new, d_model, generator=g, dtype=dtype)
    if repel:  # w_k = -w_q: q . k of a token with itself is -|q|^2, and x times 1000 makes it about -1e6
        x, params["w_k"], params["b_k"] = 1000 * x, -params["w_q"], -params["b_q"]
    cache = None if past is None else {name: torch.randn(batch, heads, past, d_k, generator=g, dtype=dtype)
                                       for name in ("key", "value")}
    return Case(label, (x, params, heads, cache))


def _attention_cases() -> list[Case]:
    g = torch.Generator().manual_seed(143)
    return [
        _attention_case("the prompt: no cache yet, 4 new tokens, causal among them", g, 2, 4, None, 2, 3),
        _attention_case("one new token, 5 cached (B=2, H=2, d_k=3)", g, 2, 1, 5, 2, 3),
        _attention_case("3 new tokens after 2 cached: causal with an offset", g, 1, 3, 2, 4, 2),
        _attention_case("3 new after 3 cached, one head", g, 3, 3, 3, 1, 4),
        _attention_case("one new token after 1 cached, float64", g, 2, 1, 1, 3, 2, torch.float64),
        _attention_case("2 new tokens after 70 cached: every cached position counts", g, 1, 2, 70, 2, 3),
        _attention_case("the prompt, w_k = -w_q, x times 1000: each token scores -1e6 with itself, a masked key "
                        "filled with -1e4 wins", g, 1, 3, None, 2, 3, repel=True),
    ]


def _cached_attention_variant(axis=2, new_first=False, mask="last rows", keep_cache=False,
                              values_from="v"):
    def variant(x, params, num_heads, cache=None):
        q, k, v = (split_heads(linear(x, params[f"w_{n}"], params.get(f"b_{n}")), num_heads) for n in "qkv")
        if values_from == "k":
            v = k
        old = cache
        if cache is not None:
            k = torch.cat([k, cache["key"]] if new_first else [cache["key"], k], dim=axis)
            v = torch.cat([v, cache["value"]] if new_first else [cache["value"], v], dim=axis)
        length = k.size(2)
        full = causal_mask(length, device=x.device)
        m = {"last rows": full[:, :, -x.size(1):], "first rows": full[:, :, :x.size(1)], "none": None}[mask]
        context, _ = scaled_dot_product_attention(q, k, v, m)
        output = linear(merge_heads(context), params["w_o"], params.get("b_o"))
        if keep_cache:
            return output, old if old is not None else {"key": k, "value": v}
        return output, {"key": k, "value": v}
    return variant


register(Exercise(
    name="cached_self_attention",
    contract=Contract(axes={"B": {"x": (0,), "cache": (0,)}, "L": {"x": (1,)}},
                      scales={"x": (1e3,)}, base=2),  # scores far past 1e4: a fill of -1e4 lets masked keys win
    reference=cached_self_attention,
    make_cases=_attention_cases,
    output_names=("output", "new cache"),
    mistakes=[
        Mistake("cache concatenated on the wrong axis",
                "keys and values are (B, H, L, d_k): the new tokens extend the length axis, "
                "torch.cat([cache['key'], k], dim=2)",
                _cached_attention_variant(axis=1),
                also=(_cached_attention_variant(axis=3), _cached_attention_variant(axis=0))),
        Mistake("new keys put before the cached ones",
                "the cache holds the earlier positions: torch.cat([cache['key'], k], dim=2), old first, "
                "so that key j is position j and the causal mask lines up",
                _cached_attention_variant(new_first=True)),
        Mistake("causal mask forgotten among the new tokens",
                "with several new tokens (the prompt), each may see the cached ones and the new ones up "
                "to itself: causal_mask(L_past + L_new)[:, :, -L_new:]",
                _cached_attention_variant(mask="none")),
        Mistake("the mask's first rows taken: the new tokens are the LAST rows",
                "the new tokens sit at positions L_past .. L_past + L_new - 1: take the last L_new "
                "rows of the (L_past + L_new)-square causal mask",
                _cached_attention_variant(mask="first rows")),
        Mistake("the old cache handed back: the new token is never cached",
                "return the concatenated keys and values, so the next step sees this token too",
                _cached_attention_variant(keep_cache=True)),
        Mistake("values computed with the key projection",
                "v = split_heads(linear(x, params['w_v'], params['b_v']), num_heads): values have their own projection",
                _cached_attention_variant(values_from="k")),
    ],
))


# ---- lm_step: the language model on new tokens, with a cache per block ---------------------------

def _lm(config: LMConfig, g: torch.Generator) -> dict:
    """init_lm_params, with LayerNorm moved away from gamma = 1, beta = 0 (where skipping a norm
    would not show) and no gradients (generation never trains)."""
    params = init_lm_params(config, g)
    with torch.no_grad():
        for p in parameters(params):
            if p.dim() == 1:
                p.add_(0.3 * torch.randn(p.shape, generator=g))
            p.requires_grad_(False)
    return params


def _lm_step_case(label, g, config, batch, past, new):
    """A case that feeds `new` tokens after `past` tokens already in the cache (None: no cache)."""
    params = _lm(config, g)
    ids = torch.randint(0, config.vocab_size, (batch, (past or 0) + new), generator=g)
    caches = None if past is None else lm_step(params, ids[:, :past], config)[1]
    return Case(label, (params, ids[:, (past or 0):], config, caches))


def _lm_step_cases() -> list[Case]:
    g = torch.Generator().manual_seed(144)
    one = LMConfig(vocab_size=9, d_model=8, num_heads=2, d_ff=12, num_layers=1, max_len=12)
    two = LMConfig(vocab_size=7, d_model=6, num_heads=3, d_ff=10, num_layers=2, max_len=10)
    return [
        _lm_step_case("the prompt: 4 tokens, no cache, 1 block", g, one, 2, None, 4),
        _lm_step_case("one new token after 5 cached, 2 blocks", g, two, 2, 5, 1),
        _lm_step_case("3 new tokens after 2 cached, 2 blocks", g, two, 1, 2, 3),
        _lm_step_case("one new token after 1 cached, 1 block", g, one, 3, 1, 1),
        _lm_step_case("2 new tokens after 68 cached: a context past 64", g, LMConfig(9, 8, 2, 12, 1, 80), 1, 68, 2),
    ]


def _lm_step_variant(positions="continue", cache_of="own", scale=True, final_norm=True):
    def variant(params, ids, config, caches=None):
        start = 0 if caches is None or positions == "restart" else caches[0]["key"].size(2)
        table = params["token_embedding"]
        tokens = embed(ids, table) if scale else table[ids]
        x = tokens + params["position_embedding"][start:start + ids.size(1)]
        new_caches = []
        for i, block in enumerate(params["blocks"]):
            h = layer_norm(x, block["norm1"]["gamma"], block["norm1"]["beta"])
            cache = None if caches is None else {"own": caches[i], "first": caches[0], "none": None}[cache_of]
            attended, cache = cached_self_attention(h, block["attention"], config.num_heads, cache)
            x = x + attended
            h = layer_norm(x, block["norm2"]["gamma"], block["norm2"]["beta"])
            x = x + feed_forward(h, block["ffn"])
            new_caches.append(cache)
        if final_norm:
            x = layer_norm(x, params["final_norm"]["gamma"], params["final_norm"]["beta"])
        return linear(x, params["token_embedding"]), new_caches
    return variant


register(Exercise(
    name="lm_step",
    contract=Contract(axes={"B": {"ids": (0,)}}),
    reference=lm_step,
    make_cases=_lm_step_cases,
    output_names=("logits", "new caches"),
    mistakes=[
        Mistake("positions restart at 0 at every cached step",
                "the new tokens sit at positions L_past .. L_past + L_new - 1, where L_past is the "
                "cache's length (caches[0]['key'].size(2)): position_embedding[L_past:L_past + L_new]",
                _lm_step_variant(positions="restart")),
        Mistake("every block given the first block's cache",
                "each block has its own keys and values: hand block i caches[i]",
                _lm_step_variant(cache_of="first")),
        Mistake("the cache not used: the new tokens see only each other",
                "hand each block its cache, so the new tokens attend to every earlier one",
                _lm_step_variant(cache_of="none")),
        Mistake("token embeddings not multiplied by sqrt(D)",
                "use embed(ids, params['token_embedding']), as lm_forward does: the cached model "
                "must compute what the uncached one computes",
                _lm_step_variant(scale=False)),
        Mistake("final LayerNorm forgotten",
                "after the last block, layer_norm with params['final_norm'], then the tied output layer",
                _lm_step_variant(final_norm=False)),
    ],
))
