"""tfmlib.generation: the sampling filters against straightforward references, sampling with a
torch.Generator, and attention with a KV cache against attention over the whole sequence."""
import math

import pytest
import torch

from tfmlib import (LMConfig, cached_self_attention, causal_mask, generate, greedy_next_token,
                    init_lm_params, init_mha_params, lm_forward, lm_step, multi_head_attention,
                    next_token_probs, sample_next_token, top_k_filter, top_p_filter)
from tfmlib.training import parameters

SEEDS = range(6)


def awkward_logits(seed, integer=False, dtype=torch.float64):
    """(B, L, V) logits of odd sizes; `integer`: whole numbers, so that rows hold many ties."""
    g = torch.Generator().manual_seed(seed)
    shape = (int(torch.randint(1, 4, (), generator=g)), int(torch.randint(1, 5, (), generator=g)),
             int(torch.randint(1, 12, (), generator=g)))
    if integer:
        return torch.randint(-3, 4, shape, generator=g).to(dtype)
    return (3 * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype)


# ---- straightforward references, one row at a time in plain Python ----------------------------

def top_k_by_hand(row: list[float], k: int) -> list[float]:
    """Keep every value at least as large as the k-th largest (ties at the k-th stay)."""
    kth = sorted(row, reverse=True)[min(k, len(row)) - 1]
    return [x if x >= kth else -math.inf for x in row]


def top_p_by_hand(row: list[float], p: float) -> list[float]:
    """Walk down from the most likely token, adding each while the mass before it is < p;
    then keep every token tied with the last one added."""
    top = max(row)
    weights = [math.exp(x - top) for x in row]
    total = sum(weights)
    probs = [w / total for w in weights]
    mass, last_kept = 0.0, None
    for prob, x in sorted(zip(probs, row), reverse=True):
        if mass >= p:
            break
        mass += prob
        last_kept = x
    return [x if x >= last_kept else -math.inf for x in row]


def by_rows(function, logits, arg):
    rows = logits.reshape(-1, logits.size(-1)).tolist()
    return torch.tensor([function(row, arg) for row in rows], dtype=logits.dtype).reshape(logits.shape)


def hugging_face_top_p(logits, p):
    """Hugging Face's TopPLogitsWarper rule (transformers 4.x): sort ascending, drop the tokens
    whose cumulative probability is <= 1 - p, always keep the most likely one."""
    sorted_logits, order = torch.sort(logits, descending=False)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cumulative <= (1 - p)
    remove[..., -1:] = False
    remove = remove.scatter(-1, order, remove)
    return logits.masked_fill(remove, -math.inf)


# ---- greedy and temperature -------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_greedy_is_argmax_and_ties_go_to_the_lowest_id(seed):
    logits = awkward_logits(seed, integer=True)
    expected = [max(range(len(row)), key=lambda i: (row[i], -i))
                for row in logits.reshape(-1, logits.size(-1)).tolist()]
    assert greedy_next_token(logits).reshape(-1).tolist() == expected


@pytest.mark.parametrize("temperature", [0.1, 0.5, 1.0, 2.0, 7])
def test_temperature_divides_the_logits_before_the_softmax(temperature):
    logits = awkward_logits(int(10 * temperature), dtype=torch.float32)
    probs = next_token_probs(logits, temperature)
    torch.testing.assert_close(probs, torch.softmax(logits.double() / temperature, dim=-1).float())
    torch.testing.assert_close(probs.sum(dim=-1), torch.ones(logits.shape[:-1]))


def test_low_temperature_approaches_greedy_and_high_temperature_uniform():
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0])
    assert next_token_probs(logits, 0.01)[0] > 0.999
    assert (next_token_probs(logits, 1000.0) - 0.25).abs().max() < 1e-3


# ---- top-k ------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("integer", [False, True])
def test_top_k_matches_the_reference_by_hand(seed, integer):
    logits = awkward_logits(seed, integer)
    for k in range(1, logits.size(-1) + 3):
        assert torch.equal(top_k_filter(logits, k), by_rows(top_k_by_hand, logits, k)), k


def test_top_k_keeps_every_token_tied_with_the_kth():
    logits = torch.tensor([3.0, 1.0, 2.0, 1.0, 0.0, 1.0])
    kept = top_k_filter(logits, 2) > -math.inf
    assert kept.tolist() == [True, False, True, False, False, False]
    kept = top_k_filter(logits, 3) > -math.inf   # the 3rd largest is 1.0, held by three tokens
    assert kept.tolist() == [True, True, True, True, False, True]


def test_top_k_without_ties_keeps_exactly_k_like_torch_topk():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    for k in (1, 7, 50):
        kept = top_k_filter(logits, k) > -math.inf
        assert kept.sum(dim=-1).tolist() == [k] * 4
        assert torch.equal(kept.nonzero()[:, 1].reshape(4, k).sort().values,
                           logits.topk(k).indices.sort().values)


# ---- top-p ------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("integer", [False, True])
def test_top_p_matches_the_reference_by_hand(seed, integer):
    logits = awkward_logits(seed, integer)
    for p in (0.01, 0.2, 0.5, 0.77, 0.9, 0.99, 1.0):
        assert torch.equal(top_p_filter(logits, p), by_rows(top_p_by_hand, logits, p)), p


@pytest.mark.parametrize("seed", SEEDS)
def test_top_p_agrees_with_hugging_face_when_there_are_no_ties(seed):
    logits = awkward_logits(seed)
    for p in (0.05, 0.3, 0.6, 0.8, 0.95, 1.0):
        assert torch.equal(top_p_filter(logits, p), hugging_face_top_p(logits, p)), p


def test_top_p_keeps_the_smallest_set_that_reaches_p_exactly_at_the_threshold():
    ln2 = math.log(2.0)
    logits = torch.tensor([2 * ln2, ln2, 0.0, -ln2])   # probabilities 8/15, 4/15, 2/15, 1/15
    probs = torch.softmax(logits, dim=-1)
    reached = float(probs[:2].sum())                     # the mass of the first two, in float32
    assert float(probs.cumsum(dim=-1)[1]) == reached

    def kept(p):
        return (top_p_filter(logits, p) > -math.inf).sum().item()

    def next_float32(p, towards):  # the mass is compared in float32, the logits' dtype
        return float(torch.nextafter(torch.tensor(p), torch.tensor(towards)))
    assert kept(reached) == 2                            # exactly p after two tokens: those two
    assert kept(next_float32(reached, 1.0)) == 3         # a hair more needs the third
    assert kept(next_float32(reached, 0.0)) == 2
    assert kept(float(probs[0])) == 1
    # and with probabilities that are exact binary fractions: 0.5, 0.25, 0.125, 0.125
    exact = torch.tensor([2 * ln2, ln2, 0.0, 0.0])
    assert torch.softmax(exact, dim=-1).tolist() == [0.5, 0.25, 0.125, 0.125]
    assert (top_p_filter(exact, 0.75) > -math.inf).tolist() == [True, True, False, False]
    assert torch.equal(top_p_filter(exact, 0.75), hugging_face_top_p(exact, 0.75))


def test_top_p_keeps_ties_at_the_cutoff_together_and_never_drops_the_top_token():
    logits = torch.tensor([[2.0, 1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    kept = top_p_filter(logits, 0.6) > -math.inf
    assert kept.tolist() == [[True, True, True, True, False], [True] * 5]
    assert (top_p_filter(torch.tensor([5.0, 0.0, -1.0]), 1e-6) > -math.inf).tolist() == [True, False, False]


def test_top_p_of_one_keeps_every_token_whose_probability_the_running_sum_sees():
    logits = torch.tensor([[3.0, 0.0, -3.0, -math.inf], [1.0, 1.0, 1.0, 1.0]])
    assert torch.equal(top_p_filter(logits, 1.0), logits)
    # A token whose probability is below float32's rounding of the sum before it (1e-13 here)
    # adds nothing to the running sum, which has already reached 1: it is dropped.
    assert (top_p_filter(torch.tensor([30.0, 0.0]), 1.0) > -math.inf).tolist() == [True, False]


@pytest.mark.parametrize("seed", SEEDS)
def test_filters_do_not_depend_on_the_order_of_the_vocabulary(seed):
    logits = awkward_logits(seed, integer=True)
    order = torch.randperm(logits.size(-1), generator=torch.Generator().manual_seed(seed))
    for f, arg in ((top_k_filter, 2), (top_p_filter, 0.7)):
        assert torch.equal(f(logits, arg)[..., order], f(logits[..., order], arg))


# ---- sampling ---------------------------------------------------------------------------------

def test_sampling_with_the_same_generator_seed_repeats_exactly():
    logits = awkward_logits(3, dtype=torch.float32)
    draws = [sample_next_token(logits, 0.8, top_k=5, top_p=0.9,
                               generator=torch.Generator().manual_seed(7)) for _ in range(2)]
    assert torch.equal(draws[0], draws[1])
    assert draws[0].shape == logits.shape[:-1] and draws[0].dtype == torch.long


def test_sampling_frequencies_follow_the_filtered_distribution():
    logits = torch.tensor([2.0, 1.5, 1.0, 0.0, -1.0, -3.0])
    g = torch.Generator().manual_seed(0)
    many = logits.expand(40000, -1)
    ids = sample_next_token(many, temperature=0.7, top_k=4, generator=g)
    counts = torch.bincount(ids, minlength=6).double() / len(ids)
    expected = torch.softmax(top_k_filter(logits.double() / 0.7, 4), dim=-1)
    assert counts[4:].sum() == 0                      # filtered tokens are never drawn
    assert (counts - expected).abs().max() < 0.01     # about 4 standard errors at n = 40000
    ids = sample_next_token(many, top_p=0.5, generator=g)
    assert set(ids.tolist()) == {0, 1}                # 2.0 alone holds 0.47 < 0.5


# ---- the KV cache -----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_attention_in_chunks_with_a_cache_equals_causal_attention_over_the_whole(seed):
    g = torch.Generator().manual_seed(seed)
    heads, d_k = int(torch.randint(1, 4, (), generator=g)), int(torch.randint(1, 5, (), generator=g))
    batch, length = int(torch.randint(1, 4, (), generator=g)), int(torch.randint(2, 9, (), generator=g))
    params = init_mha_params(heads * d_k, generator=g, dtype=torch.float64)
    params = {k: v + 0.1 * torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in params.items()}
    x = torch.randn(batch, length, heads * d_k, generator=g, dtype=torch.float64)
    whole, _ = multi_head_attention(x, x, x, params, heads, causal_mask(length))
    cuts = sorted(set(torch.randint(1, length, (3,), generator=g).tolist())) + [length]
    pieces, cache, start = [], None, 0
    for end in cuts:
        out, cache = cached_self_attention(x[:, start:end], params, heads, cache)
        assert cache["key"].shape == (batch, heads, end, d_k)
        pieces.append(out)
        start = end
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole)


def test_the_cache_holds_the_keys_and_values_of_every_token_so_far():
    g = torch.Generator().manual_seed(1)
    params = init_mha_params(6, generator=g)
    x = torch.randn(2, 5, 6, generator=g)
    _, cache = cached_self_attention(x, params, 3)
    k = (x @ params["w_k"].T + params["b_k"]).reshape(2, 5, 3, 2).transpose(1, 2)
    torch.testing.assert_close(cache["key"], k)


# ---- the language model with a cache: lm_step and generate --------------------------------------

CONFIGS = [LMConfig(vocab_size=11, d_model=12, num_heads=3, d_ff=20, num_layers=2, max_len=24),
           LMConfig(vocab_size=5, d_model=8, num_heads=1, d_ff=8, num_layers=1, max_len=16),
           LMConfig(vocab_size=30, d_model=16, num_heads=4, d_ff=32, num_layers=3, max_len=20)]


def lm(config, seed, dtype=torch.float32):
    """A random model with its norms moved off 1 and 0, so every piece shows in the logits."""
    g = torch.Generator().manual_seed(seed)
    params = init_lm_params(config, g, dtype=dtype)
    with torch.no_grad():
        for p in parameters(params):
            p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=dtype))
    return params


@pytest.mark.parametrize("config", CONFIGS)
def test_lm_step_in_chunks_gives_lm_forwards_logits(config):
    params = lm(config, 0, torch.float64)
    ids = torch.randint(0, config.vocab_size, (3, config.max_len), generator=torch.Generator().manual_seed(1))
    whole = lm_forward(params, ids, config)
    pieces, caches = [], None
    for start, end in ((0, 5), (5, 6), (6, 11), (11, config.max_len)):
        logits, caches = lm_step(params, ids[:, start:end], config, caches)
        pieces.append(logits)
        assert [c["key"].size(2) for c in caches] == [end] * config.num_layers
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole)


def test_cached_steps_continue_the_positions():
    """The 4th token, fed after 3 cached ones, gets position 3's embedding, not position 0's."""
    config = CONFIGS[0]
    params = lm(config, 2)
    ids = torch.tensor([[1, 2, 3, 4]])
    _, caches = lm_step(params, ids[:, :3], config)
    step, _ = lm_step(params, ids[:, 3:], config, caches)
    torch.testing.assert_close(step, lm_forward(params, ids, config)[:, 3:])
    restarting = params["position_embedding"].detach().clone()
    restarting[3] = restarting[0]                     # what a step restarting at 0 would read
    as_if_restarted, _ = lm_step({**params, "position_embedding": restarting}, ids[:, 3:], config, caches)
    assert not torch.allclose(as_if_restarted, step)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("seed", range(4))
def test_generation_with_the_cache_gives_the_same_tokens_as_without(config, seed):
    params = lm(config, seed)
    g = torch.Generator().manual_seed(100 + seed)
    prompt = torch.randint(0, config.vocab_size, (2, 1 + seed), generator=g)
    n = config.max_len - prompt.size(1) + 1
    for options in (dict(greedy=True), dict(temperature=1.3), dict(temperature=0.8, top_k=3),
                    dict(top_p=0.9), dict(temperature=1.5, top_k=4, top_p=0.8)):
        runs = [generate(params, prompt, config, n, generator=torch.Generator().manual_seed(seed),
                         use_cache=use_cache, **options) for use_cache in (True, False)]
        assert runs[0].shape == (2, prompt.size(1) + n)
        assert torch.equal(runs[0][:, :prompt.size(1)], prompt)
        assert torch.equal(runs[0], runs[1]), options


def test_generation_is_repeatable_with_a_seeded_generator_and_greedy_is_deterministic():
    config = CONFIGS[0]
    params = lm(config, 5)
    prompt = torch.tensor([[3, 1, 4]])
    def sampled(seed):
        return generate(params, prompt, config, 12, temperature=2.0, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(sampled(0), sampled(0))
    assert not all(torch.equal(sampled(0), sampled(s)) for s in range(1, 4))
    greedy = generate(params, prompt, config, 12, greedy=True)
    assert torch.equal(greedy, generate(params, prompt, config, 12, greedy=True, use_cache=False))
    # greedy is the limit of a temperature going to 0
    assert torch.equal(greedy, generate(params, prompt, config, 12, temperature=1e-4,
                                        generator=torch.Generator().manual_seed(9)))


# ---- past the context: the sliding window ---------------------------------------------------------

def generate_by_hand(params, prompt, config, max_new_tokens, greedy, generator=None, **options):
    """The window written out: every step runs lm_forward on the last max_len tokens only."""
    ids = prompt
    for _ in range(max_new_tokens):
        last = lm_forward(params, ids[:, -config.max_len:], config)[:, -1]     # (B, V)
        new = greedy_next_token(last) if greedy else sample_next_token(last, generator=generator, **options)
        ids = torch.cat([ids, new[:, None]], dim=1)
    return ids


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_past_max_len_reads_only_the_last_max_len_tokens(config, use_cache):
    """Three times the context: each step is scored from the last max_len tokens, as if the
    text had been cropped to them (float64, so that the cached and the full passes pick alike)."""
    params = lm(config, 3, torch.float64)
    prompt = torch.randint(0, config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(4))
    n = 3 * config.max_len
    greedy = generate(params, prompt, config, n, greedy=True, use_cache=use_cache)
    assert greedy.shape == (2, 5 + n) and torch.equal(greedy[:, :5], prompt)
    assert torch.equal(greedy, generate_by_hand(params, prompt, config, n, greedy=True))
    options = dict(temperature=1.5, top_k=4, top_p=0.9)
    sampled = generate(params, prompt, config, n, generator=torch.Generator().manual_seed(7),
                       use_cache=use_cache, **options)
    by_hand = generate_by_hand(params, prompt, config, n, greedy=False,
                               generator=torch.Generator().manual_seed(7), **options)
    assert torch.equal(sampled, by_hand)


@pytest.mark.parametrize("use_cache", [True, False])
def test_a_prompt_longer_than_max_len_is_continued_from_its_last_max_len_tokens(use_cache):
    """Cropping the prompt by hand to its last max_len tokens gives the same new tokens."""
    config = CONFIGS[1]                                          # max_len 16
    params = lm(config, 6, torch.float64)
    prompt = torch.randint(0, config.vocab_size, (3, 40), generator=torch.Generator().manual_seed(8))
    long = generate(params, prompt, config, 20, greedy=True, use_cache=use_cache)
    cropped = generate(params, prompt[:, -16:], config, 20, greedy=True, use_cache=use_cache)
    assert long.shape == (3, 60) and torch.equal(long[:, :40], prompt)
    assert torch.equal(long[:, 40:], cropped[:, 16:])


def test_the_window_is_what_the_model_reads_a_token_outside_it_changes_nothing():
    """A hand-made case: two prompts that differ only before the last max_len tokens continue
    alike, and differ inside the window continue (here) differently."""
    config = CONFIGS[0]                                          # max_len 24
    params = lm(config, 1, torch.float64)
    base = torch.randint(0, config.vocab_size, (1, 30), generator=torch.Generator().manual_seed(2))
    outside, inside = base.clone(), base.clone()
    outside[0, 5] = (base[0, 5] + 1) % config.vocab_size        # position 5 < 30 - 24: outside
    inside[0, 29] = (base[0, 29] + 1) % config.vocab_size        # the last token: inside
    runs = {name: generate(params, ids, config, 10, greedy=True)[:, 30:]
            for name, ids in (("base", base), ("outside", outside), ("inside", inside))}
    assert torch.equal(runs["base"], runs["outside"])
    logits = {name: lm_forward(params, ids[:, -24:], config)[0, -1] for name, ids in
              (("base", base), ("inside", inside))}
    assert not torch.allclose(logits["base"], logits["inside"])
