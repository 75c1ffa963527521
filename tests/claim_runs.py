"""The trained results of notebooks 10, b1 and b2, re-run with the notebooks' own arguments on
another seed, and the claims the notebooks draw from them (tfmlib.claims).

tests/test_claims.py runs this file in fresh processes, each under other CPU settings (the
environment variables must be set before torch is imported, hence a process per setting):

    python tests/claim_runs.py PART SEED     # prints {claim: holds} as JSON

PART is "reverse" (notebook 10, sections 5 to 7 and question 2), "lab" (section 9, every
experiment on seed SEED), or "language_model" (b1's training and b2's generation from the
same trained model). The RECIPES are the notebooks' arguments; tests/test_claims.py checks
them against the calls in the notebooks, so that the two cannot drift apart.
"""
from __future__ import annotations

import json
import math
import sys

import torch

from tfmlib import (LMConfig, build_char_vocab, claims, decode, decode_chars, encode_chars,
                    experiments, generate, greedy_next_token, lm_forward, lm_step, make_corpus,
                    next_token_probs, top_k_filter, top_p_filter, train, train_lm)
from tfmlib.language_model import (ADJECTIVES, DETERMINERS, NOUNS, VERBS, baseline_loss,
                                   bigram_log_probs, grammar_words)
from tfmlib.training import (VOCAB, ModelConfig, digits_to_ids, exact_match_by_length, greedy_decode,
                             make_batch)

#: The arguments of the notebooks' trainings (the seed aside), as the notebooks spell them.
RECIPES = {
    "train": dict(task="reverse", steps=500, batch_size=64, lr=2e-2, min_len=3, max_len=10),
    "train_lm": dict(steps=500, batch_size=16, lr=2e-2, eval_every=100),
}
LM_CONFIG = dict(d_model=32, num_heads=4, d_ff=128, num_layers=2, max_len=32)


def reverse(seed: int) -> dict[str, bool]:
    """Notebook 10: the reverse task's training, its held-out examples, question 2."""
    config = ModelConfig()
    params, history = train(config, **RECIPES["train"], seed=seed)
    held_src, _ = make_batch("reverse", 6, 3, 8, held_out=True, generator=torch.Generator().manual_seed(9))
    examples = [decode(s, VOCAB) for s in held_src]
    answers = {e: decode(greedy_decode(params, digits_to_ids(e), config)[0], VOCAB) for e in examples}
    return {**claims.reverse_training(history), **claims.reverse_examples(answers),
            **claims.reverse_lengths(exact_match_by_length(params, config, (10, 11, 12)))}


def lab(seed: int) -> dict[str, bool]:
    """Notebook 10, section 9: every experiment of the lab on `seed`."""
    results = experiments.run_all([*experiments.EXPERIMENTS, *experiments.TABLE_EXPERIMENTS],
                                  seeds=(seed,), workers=1)
    floor = experiments.smoothed_loss_floor(0.1, len(VOCAB))
    return {**claims.lab_no_positions(results), **claims.lab_one_head(results),
            **claims.lab_many_heads(results), **claims.lab_sum_without_positions(results),
            **claims.lab_regressor_shuffled(results),
            **claims.lab_no_scaling(results), **claims.lab_layer_norm(results),
            **claims.lab_learning_rate(results), **claims.lab_label_smoothing(results, floor),
            **claims.lab_shuffled_sum(results), **claims.lab_regressor(results)}


def _grammar_entropy_per_char(text: str, num_sentences: int) -> float:
    """b1, section 3: the entropy of the grammar's choices per sentence, per character."""
    noun_phrase = (math.log(2) + math.log(len(DETERMINERS["singular"])) + math.log(2)
                   + 0.5 * math.log(len(ADJECTIVES)) + math.log(len(NOUNS["singular"])))
    per_sentence = 2 * noun_phrase + math.log(len(VERBS["singular"]))
    return per_sentence / ((len(text) + 1) / num_sentences)


def language_model(seed: int) -> dict[str, bool]:
    """b1's training and agreement; b2's generation from the same model."""
    text = make_corpus(3000, seed=0)
    vocab = build_char_vocab(text)
    chars = list(vocab)
    ids = encode_chars(text, vocab)
    split = int(0.9 * len(ids))
    train_ids, val_ids = ids[:split], ids[split:]
    config = LMConfig(vocab_size=len(vocab), **LM_CONFIG)
    params, history = train_lm(config, train_ids, val_ids, **RECIPES["train_lm"], seed=seed)
    bigram = baseline_loss(bigram_log_probs(train_ids, len(vocab)), val_ids)
    found = claims.language_model_training(history, bigram, _grammar_entropy_per_char(text, 3000))

    def last_row(prefix: str) -> torch.Tensor:
        with torch.no_grad():
            return lm_forward(params, encode_chars(prefix, vocab)[None], config)[0, -1]

    prefixes = ["the red fox see", "the red foxes see", "a small girl like", "some small girls like"]
    p_s = {prefix: last_row(prefix).softmax(-1)[vocab["s"]].item() for prefix in prefixes}
    found |= claims.subject_verb_agreement(p_s, singular=["the red fox see", "a small girl like"])

    with torch.no_grad():
        prompt = encode_chars("the small ", vocab)[None]
        last = last_row("the small ")
        found |= claims.next_characters([chars[i] for i in last.topk(len(chars)).indices],
                                        NOUNS["singular"] + NOUNS["plural"])
        settings = {"greedy": dict(greedy=True), "T = 0.5": dict(temperature=0.5),
                    "T = 2": dict(temperature=2.0), "T = 2, top-k 3": dict(temperature=2.0, top_k=3),
                    "T = 2, top-p 0.6": dict(temperature=2.0, top_p=0.6)}
        ten = prompt.expand(10, -1)
        non_words = {name: claims.count_non_words(
            [decode_chars(row[10:], vocab) for row in generate(
                params, ten, config, 22, generator=torch.Generator().manual_seed(1), **options)],
            grammar_words()) for name, options in settings.items()}
        found |= claims.sampling(non_words)

        row = last_row("the small b")                                   # b2, section 6's figure
        word_letters = {noun[1] for noun in NOUNS["singular"] + NOUNS["plural"] if noun.startswith("b")}
        fits = torch.tensor([vocab[c] for c in sorted(word_letters)])
        tail = {t: 1 - next_token_probs(row, t)[fits].sum().item() for t in (1.0, 2.0)}
        after_k = top_k_filter(row / 2.0, 3)
        after_p = top_p_filter(after_k, 0.6)
        found |= claims.filter_tail({chars[i] for i in (after_p > -math.inf).nonzero().flatten()},
                                    tail, any(chars[i] not in word_letters
                                              for i in (after_k > -math.inf).nonzero().flatten()),
                                    word_letters)

        batch = prompt.expand(3, -1)
        same_tokens = [torch.equal(*[generate(params, batch, config, 22, temperature=1.5, top_p=0.95,
                                              use_cache=use_cache, generator=torch.Generator().manual_seed(s))
                                     for use_cache in (True, False)]) for s in range(3)]
        _, caches = lm_step(params, prompt[:, :-1], config)
        step_logits, _ = lm_step(params, prompt[:, -1:], config, caches)
        restarted = params["position_embedding"].roll(9, dims=0)
        wrong_logits, _ = lm_step({**params, "position_embedding": restarted}, prompt[:, -1:], config, caches)
        found |= claims.kv_cache(same_tokens, (wrong_logits - step_logits).abs().max().item())

        greedy = generate(params, prompt, config, max_new_tokens=22, greedy=True)
        cold = generate(params, prompt, config, 22, temperature=0.01, generator=torch.Generator().manual_seed(0))
        long = generate(params, prompt, config, 70, greedy=True)        # b2, past the context
        by_hand = prompt
        for _ in range(70):
            next_id = greedy_next_token(lm_forward(params, by_hand[:, -config.max_len:], config)[:, -1])
            by_hand = torch.cat([by_hand, next_id[:, None]], dim=1)
        found |= claims.sliding_window(torch.equal(long, by_hand), long.size(1), config.max_len)
        found |= claims.cold_sampling(torch.equal(cold, greedy), next_token_probs(last, 0.01).max().item())
    return found


PARTS = {"reverse": reverse, "lab": lab, "language_model": language_model}

if __name__ == "__main__":
    part, seed = sys.argv[1], int(sys.argv[2])
    print(json.dumps(PARTS[part](seed)))
