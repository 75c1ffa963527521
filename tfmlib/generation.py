"""Bonus notebook b2: from a language model's logits to text, and the KV cache.

A language model gives one row of logits (..., V) per position; the last row scores every
candidate for the next token. Decoding picks one:
  greedy      the most likely token (ties: the lowest id, as argmax does);
  temperature logits / T before the softmax: T < 1 sharpens, T > 1 flattens;
  top-k       keep the k largest logits of the row, -inf for the others;
  top-p       keep the smallest set of most likely tokens whose probabilities sum to >= p;
and then samples from softmax of what is left, with a torch.Generator for repeatable runs.
Filters keep ties together: a token whose logit equals the last one kept is kept too, so the
result never depends on the order of the vocabulary.

The KV cache: at step t only the new token is fed through the model. Its query attends to the
keys and values of every earlier token, which the cache holds from the steps before, instead of
computing them again. One step then costs O(L) instead of the O(L^2) of a full forward pass.
"""
from __future__ import annotations

import torch

from ._validation import (require_float, require_generator, require_integer_ids, require_keys,
                          require_min_ndim, require_ndim, require_positive_int, shape_str)
from .attention import scaled_dot_product_attention
from .embeddings import embed
from .language_model import LM_KEYS, LMConfig, lm_forward
from .masks import causal_mask
from .multihead import linear, merge_heads, split_heads
from .sublayers import feed_forward, layer_norm

# ---- choosing the next token ------------------------------------------------------------------


def greedy_next_token(logits: torch.Tensor) -> torch.Tensor:
    """(..., V) logits -> (...) ids of the largest logit; on a tie, the lowest id."""
    _check_logits(logits)
    return logits.argmax(dim=-1)


def next_token_probs(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """(..., V) logits -> (..., V) probabilities softmax(logits / temperature).

    The temperature divides the logits, before the softmax: dividing the probabilities after
    it would not even give a distribution.
    """
    _check_temperature_inputs(logits, temperature)
    return torch.softmax(logits / temperature, dim=-1)


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """(..., V) -> (..., V): each row keeps its k largest logits; the others become -inf.

    Ties: every token whose logit equals the k-th largest is kept, so a row may keep more than
    k tokens (Hugging Face's TopKLogitsWarper does the same). k >= V keeps every token.
    """
    _check_top_k_inputs(logits, k)
    k = min(k, logits.size(-1))
    kth_largest = logits.topk(k, dim=-1).values[..., -1:]                 # (..., 1)
    return logits.masked_fill(logits < kth_largest, float("-inf"))        # (..., V)


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """(..., V) -> (..., V): each row keeps the smallest set of most likely tokens whose
    probabilities sum to at least p (nucleus sampling); the others become -inf.

    Walking down the tokens from the most likely, a token is kept while the ones before it
    hold less than p: the token that reaches p is kept, the next one is not. If the first
    two hold exactly p, exactly those two stay (the sum is taken in the logits' dtype). The most
    likely token is always kept; p = 1 keeps every token but those too unlikely to change the
    running sum at all (below about 1e-7 of it in float32). Ties: as in top_k_filter, a token
    whose logit equals the last kept one is kept too.
    """
    _check_top_p_inputs(logits, p)
    sorted_logits = logits.sort(dim=-1, descending=True).values           # (..., V), largest first
    probs = torch.softmax(sorted_logits, dim=-1)                           # (..., V)
    mass_before = probs.cumsum(dim=-1) - probs                             # (..., V)
    kept = mass_before < p                                                 # a prefix of the order
    smallest_kept = sorted_logits.masked_fill(~kept, float("inf")).amin(dim=-1, keepdim=True)  # (..., 1)
    return logits.masked_fill(logits < smallest_kept, float("-inf"))      # (..., V)


def sample_next_token(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                      top_p: float | None = None,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """(..., V) logits -> (...) sampled ids: temperature first, then top-k, then top-p (the
    order Hugging Face's generate uses), then one draw from the softmax of what is left.

    The same generator state gives the same tokens: seed one for a repeatable run.
    """
    _check_sampling_inputs(logits, temperature, top_k, top_p, generator)
    logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = torch.softmax(logits, dim=-1).reshape(-1, logits.size(-1))    # (N, V)
    ids = torch.multinomial(probs, num_samples=1, generator=generator)     # (N, 1)
    return ids.reshape(logits.shape[:-1])                                  # (...)


# ---- the KV cache -----------------------------------------------------------------------------


def cached_self_attention(x: torch.Tensor, params: dict, num_heads: int,
                          cache: dict | None = None):
    """Causal self-attention of L_new new tokens that also attend to the cached earlier ones.

    x (B, L_new, D), cache {"key", "value"} each (B, H, L_past, d_k) or None (nothing yet)
    -> output (B, L_new, D), new cache {"key", "value"} each (B, H, L_past + L_new, d_k).

    The new tokens sit at positions L_past .. L_past + L_new - 1: each may attend to every
    cached token and to the new ones up to itself. The cache grows along its length axis (2).
    """
    _check_cached_attention_inputs(x, params, num_heads, cache)
    q = split_heads(linear(x, params["w_q"], params.get("b_q")), num_heads)   # (B, H, Ln, d_k)
    k = split_heads(linear(x, params["w_k"], params.get("b_k")), num_heads)   # (B, H, Ln, d_k)
    v = split_heads(linear(x, params["w_v"], params.get("b_v")), num_heads)   # (B, H, Ln, d_k)
    if cache is not None:
        k = torch.cat([cache["key"], k], dim=2)                               # (B, H, Lp + Ln, d_k)
        v = torch.cat([cache["value"], v], dim=2)                             # (B, H, Lp + Ln, d_k)
    mask = causal_mask(k.size(2), device=x.device)[:, :, -x.size(1):]         # (1, 1, Ln, Lp + Ln)
    context, _ = scaled_dot_product_attention(q, k, v, mask)                  # (B, H, Ln, d_k)
    output = linear(merge_heads(context), params["w_o"], params.get("b_o"))  # (B, Ln, D)
    return output, {"key": k, "value": v}


def lm_step(params: dict, ids: torch.Tensor, config: LMConfig, caches: list[dict] | None = None):
    """The language model of notebook b1 on the tokens it has not seen yet, with a KV cache.

    ids (B, L_new), caches: one {"key", "value"} (B, H, L_past, d_k) per block from the steps
    before, or None -> logits (B, L_new, V), new caches (B, H, L_past + L_new, d_k) per block.

    The new tokens sit at positions L_past .. L_past + L_new - 1: their position embeddings
    continue where the cache ends, they do not restart at 0. Run on a whole sequence with no
    cache, it gives lm_forward's logits.
    """
    _check_lm_step_inputs(params, ids, config, caches)
    start = 0 if caches is None else caches[0]["key"].size(2)                      # L_past
    positions = params["position_embedding"][start:start + ids.size(1)]            # (Ln, D)
    x = embed(ids, params["token_embedding"]) + positions                          # (B, Ln, D)
    new_caches = []
    for i, block in enumerate(params["blocks"]):
        h = layer_norm(x, block["norm1"]["gamma"], block["norm1"]["beta"])         # (B, Ln, D)
        attended, cache = cached_self_attention(h, block["attention"], config.num_heads,
                                                None if caches is None else caches[i])
        x = x + attended                                                            # (B, Ln, D)
        h = layer_norm(x, block["norm2"]["gamma"], block["norm2"]["beta"])
        x = x + feed_forward(h, block["ffn"])                                       # (B, Ln, D)
        new_caches.append(cache)
    h = layer_norm(x, params["final_norm"]["gamma"], params["final_norm"]["beta"])  # (B, Ln, D)
    return linear(h, params["token_embedding"]), new_caches   # tied: (B, Ln, V), and the caches


@torch.no_grad()  # generation never trains
def generate(params: dict, prompt: torch.Tensor, config: LMConfig, max_new_tokens: int, *,
             greedy: bool = False, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, generator: torch.Generator | None = None,
             use_cache: bool = True) -> torch.Tensor:
    """prompt (B, L_prompt) ids -> (B, L_prompt + max_new_tokens) ids: the prompt, continued.

    Each step scores the next token from the last row of logits and picks it greedily or with
    sample_next_token (temperature, top_k, top_p, generator). With use_cache, the prompt goes
    through lm_step once and every later step feeds only the one new token; without, every
    step runs lm_forward on the whole sequence so far. Both give the same tokens.

    A sliding window: the model reads at most config.max_len tokens, so each step scores the
    next token from the last max_len tokens of the text only (the context), however long the
    prompt and the text grow. Past max_len the window moves by one token per step, and every
    token in it moves to the position before: the cached keys and values, computed at the old
    positions, no longer hold, so the step runs the model on the whole window again (the cache
    saves work only while the text fits the context).
    """
    _check_generate_inputs(params, prompt, config, max_new_tokens, greedy, temperature, top_k,
                           top_p, generator)
    window = config.max_len
    ids, new, caches = prompt, prompt[:, -window:], None
    for _ in range(max_new_tokens):
        if use_cache and caches is not None and caches[0]["key"].size(2) + new.size(1) > window:
            new, caches = ids[:, -window:], None     # the window slid: start the cache again
        if use_cache:
            logits, caches = lm_step(params, new, config, caches)                  # (B, Ln, V)
        else:
            logits = lm_forward(params, ids[:, -window:], config)                   # (B, <= max_len, V)
        last = logits[:, -1]                                                        # (B, V)
        new = (greedy_next_token(last) if greedy else
               sample_next_token(last, temperature, top_k, top_p, generator))[:, None]  # (B, 1)
        ids = torch.cat([ids, new], dim=1)                                          # (B, L + 1)
    return ids


# ---- argument checks --------------------------------------------------------------------------


def _check_logits(logits) -> None:
    require_min_ndim("logits", logits, 1, "(..., V)")
    require_float("logits", logits)
    if logits.size(-1) == 0:
        raise ValueError(f"logits: expected at least one token on the last axis (..., V), "
                         f"got shape {shape_str(logits)}")


def _check_temperature(temperature) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature: expected a float > 0, got {temperature!r}")
    if not temperature > 0:  # also refuses nan
        raise ValueError(f"temperature: expected a float > 0 (use greedy_next_token for the "
                         f"limit T -> 0), got {temperature}")


def _check_k(k, name: str = "k") -> None:
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"{name}: expected an int >= 1, the number of tokens to keep, got {k!r}")
    if k < 1:
        raise ValueError(f"{name}: expected an int >= 1, the number of tokens to keep, got {k}")


def _check_p(p, name: str = "p") -> None:
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise TypeError(f"{name}: expected a float in (0, 1], the probability mass to keep, "
                        f"got {p!r}")
    if not 0 < p <= 1:  # also refuses nan
        raise ValueError(f"{name}: expected a float in (0, 1], the probability mass to keep, "
                         f"got {p}")


def _check_temperature_inputs(logits, temperature) -> None:
    _check_logits(logits)
    _check_temperature(temperature)


def _check_top_k_inputs(logits, k) -> None:
    _check_logits(logits)
    _check_k(k)


def _check_top_p_inputs(logits, p) -> None:
    _check_logits(logits)
    _check_p(p)


def _check_sampling_inputs(logits, temperature, top_k, top_p, generator) -> None:
    _check_temperature_inputs(logits, temperature)
    if top_k is not None:
        _check_k(top_k, "top_k")
    if top_p is not None:
        _check_p(top_p, "top_p")
    require_generator(generator)


def _check_cached_attention_inputs(x, params, num_heads, cache) -> None:
    require_ndim("x", x, 3, "(B, L_new, D)")
    require_keys("params", params, ("w_q", "w_k", "w_v", "w_o"))
    require_positive_int("num_heads", num_heads)
    if cache is None:
        return
    require_keys("cache", cache, ("key", "value"))
    batch, d_model = x.size(0), x.size(2)
    if d_model % num_heads:
        return  # split_heads says what is wrong, with the valid choices
    d_k = d_model // num_heads
    for key in ("key", "value"):
        entry = require_ndim(f"cache[{key!r}]", cache[key], 4, "(B, H, L_past, d_k)")
        if (entry.size(0), entry.size(1), entry.size(3)) != (batch, num_heads, d_k):
            raise ValueError(
                f"cache[{key!r}]: expected shape (B, H, L_past, d_k) = ({batch}, {num_heads}, "
                f"L_past, {d_k}) for x {shape_str(x)} and num_heads = {num_heads}, "
                f"got {shape_str(entry)} (is the cache concatenated on its length axis, 2?)")
    if cache["key"].shape != cache["value"].shape:
        raise ValueError(f"cache: expected 'key' and 'value' of the same shape, got "
                         f"{shape_str(cache['key'])} and {shape_str(cache['value'])}")


def _check_lm_step_inputs(params, ids, config, caches) -> None:
    if not isinstance(config, LMConfig):
        raise TypeError(f"config: expected an LMConfig, got {type(config).__name__}")
    require_keys("params", params, LM_KEYS)
    require_ndim("ids", ids, 2, "(B, L_new)")
    require_integer_ids("ids", ids)
    past = 0
    if caches is not None:
        if not isinstance(caches, list) or len(caches) != len(params["blocks"]):
            raise ValueError(f"caches: expected a list of one {{'key', 'value'}} per block "
                             f"({len(params['blocks'])}), as lm_step returns it, got {caches!r:.80}")
        d_k = config.d_model // config.num_heads
        for i, cache in enumerate(caches):
            require_keys(f"caches[{i}]", cache, ("key", "value"))
            for key in ("key", "value"):
                entry = require_ndim(f"caches[{i}][{key!r}]", cache[key], 4, "(B, H, L_past, d_k)")
                expected = (ids.size(0), config.num_heads, caches[0]["key"].size(2), d_k)
                if tuple(entry.shape) != expected:
                    raise ValueError(
                        f"caches[{i}][{key!r}]: expected shape (B, H, L_past, d_k) = {expected} "
                        f"for ids {shape_str(ids)} and this config, got {shape_str(entry)}")
        past = caches[0]["key"].size(2)
    if past + ids.size(1) > config.max_len:
        raise ValueError(f"ids: {past} cached + {ids.size(1)} new tokens exceed the model's "
                         f"context, config.max_len = {config.max_len}")


def _check_generate_inputs(params, prompt, config, max_new_tokens, greedy, temperature, top_k,
                           top_p, generator) -> None:
    if not isinstance(config, LMConfig):
        raise TypeError(f"config: expected an LMConfig, got {type(config).__name__}")
    require_keys("params", params, LM_KEYS)
    require_ndim("prompt", prompt, 2, "(B, L_prompt)")
    require_integer_ids("prompt", prompt)
    if prompt.size(1) == 0:
        raise ValueError(f"prompt: expected at least one token to continue, got shape "
                         f"{shape_str(prompt)}")
    if prompt.min() < 0 or prompt.max() >= config.vocab_size:
        raise ValueError(f"prompt: expected ids in [0, {config.vocab_size}) (config.vocab_size), "
                         f"got min {int(prompt.min())}, max {int(prompt.max())}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise TypeError(f"max_new_tokens: expected an int >= 1, the number of tokens to add, "
                        f"got {max_new_tokens!r}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected an int >= 1, the number of tokens to add, "
                         f"got {max_new_tokens}")
    positions = require_ndim("params['position_embedding']", params["position_embedding"], 2,
                             "(max_len, D)")
    if positions.size(0) < config.max_len:  # the window reads config.max_len positions
        raise ValueError(
            f"config: max_len = {config.max_len} is longer than the model's position table "
            f"params['position_embedding'] {shape_str(positions)}: pass the config the model was "
            f"built with, whose max_len is the context the window slides over")
    if not greedy:
        _check_temperature(temperature)
        if top_k is not None:
            _check_k(top_k, "top_k")
        if top_p is not None:
            _check_p(top_p, "top_p")
        require_generator(generator)
