"""The trained results of notebooks 10, b1 and b2, re-run with the notebooks' own arguments on
another seed: the raw numbers that the notebooks' claims (tfmlib.claims) rest on.

`make sweep` (tools/sweep.py) and tests/test_claims.py run this file in fresh processes, each
under a CPU setting of its own (the environment variables must be set before torch is
imported, hence a process per setting):

    python tests/claim_runs.py PART SEED     # prints the run's numbers as JSON

PART is "reverse" (notebook 10, sections 5 to 7 and question 2), "lab" (section 9, every
experiment on seed SEED), or "language_model" (b1's training and b2's generation from the
same trained model). The numbers are raw (losses, exact matches, counts, logits), never
verdicts: a claim is a function of them (tfmlib.claims), so re-wording a claim never needs a
new training. The RECIPES are the notebooks' arguments; tests/test_claims.py checks them
against the calls in the notebooks, so that the two cannot drift apart.
"""
from __future__ import annotations

import json
import math
import sys

import torch

from tfmlib import (LMConfig, build_char_vocab, claims, decode, decode_chars, encode_chars,
                    experiments, generate, greedy_next_token, lm_forward, lm_step, make_corpus,
                    sample_next_token, train, train_lm)
from tfmlib.language_model import (ADJECTIVES, DETERMINERS, NOUNS, VERBS, baseline_loss,
                                   bigram_log_probs, grammar_words)
from tfmlib.training import VOCAB, ModelConfig, digits_to_ids, exact_match_by_length, greedy_decode, make_batch
from tfmlib.viz.language_model import attention_of

#: The arguments of the notebooks' trainings (the seed aside), as the notebooks spell them.
RECIPES = {
    "train": dict(task="reverse", steps=500, batch_size=64, lr=2e-2, min_len=3, max_len=10),
    "train_lm": dict(steps=500, batch_size=16, lr=2e-2, eval_every=100),
}
LM_CONFIG = dict(d_model=32, num_heads=4, d_ff=128, num_layers=2, max_len=32)
#: b2's prompts and sampling settings (section 6), and b1's agreement prefixes (section 8).
PROMPT = "the small "
SAMPLING = {"greedy": dict(greedy=True), "T = 0.5": dict(temperature=0.5),
            "T = 2": dict(temperature=2.0), "T = 2, top-k 3": dict(temperature=2.0, top_k=3),
            "T = 2, top-p 0.6": dict(temperature=2.0, top_p=0.6)}
PREFIXES = ["the red fox see", "the red foxes see", "a small girl like", "some small girls like"]


def reverse(seed: int) -> dict:
    """Notebook 10: the reverse task's training, its held-out examples, question 2."""
    config = ModelConfig()
    params, history = train(config, **RECIPES["train"], seed=seed)
    held_src, _ = make_batch("reverse", 6, 3, 8, held_out=True, generator=torch.Generator().manual_seed(9))
    examples = [decode(s, VOCAB) for s in held_src]
    answers = {e: decode(greedy_decode(params, digits_to_ids(e), config)[0], VOCAB) for e in examples}
    return {**claims.reverse_numbers(history),
            "examples_right": sum(a == " ".join(reversed(e.split())) for e, a in answers.items()),
            "examples": len(examples),
            "accuracy_by_length": {str(k): v for k, v in
                                   exact_match_by_length(params, config, (10, 11, 12)).items()}}


def lab(seed: int) -> dict:
    """Notebook 10, section 9: every experiment of the lab on `seed` -> {experiment: numbers}."""
    names = [*experiments.EXPERIMENTS, *experiments.TABLE_EXPERIMENTS]
    results = experiments.run_all(names, seeds=(seed,), workers=1)
    return {name: claims.lab_numbers(results[name, seed]) for name in names}


def _grammar_entropy_per_char(text: str, num_sentences: int) -> float:
    """b1, section 3: the entropy of the grammar's choices per sentence, per character."""
    noun_phrase = (math.log(2) + math.log(len(DETERMINERS["singular"])) + math.log(2)
                   + 0.5 * math.log(len(ADJECTIVES)) + math.log(len(NOUNS["singular"])))
    per_sentence = 2 * noun_phrase + math.log(len(VERBS["singular"]))
    return per_sentence / ((len(text) + 1) / num_sentences)


def _restarting_positions(params, prompt, config, steps, temperature, generator):
    """b2's classic bug: `steps` sampled tokens, each step's position restarting at 0 (the
    cache kept, the position embedding rolled so that row L_past holds position 0)."""
    _, caches = lm_step(params, prompt[:, :-1], config)
    out = prompt
    for _ in range(steps):
        start = caches[0]["key"].size(2)
        wrong = {**params, "position_embedding": params["position_embedding"].roll(start, dims=0)}
        logits, caches = lm_step(wrong, out[:, -1:], config, caches)
        out = torch.cat([out, sample_next_token(logits[:, -1], temperature, generator=generator)[:, None]], 1)
    return out


def language_model(seed: int) -> dict:
    """b1's training, agreement and attention; b2's generation from the same model."""
    text = make_corpus(3000, seed=0)
    vocab = build_char_vocab(text)
    chars = sorted(vocab, key=vocab.get)
    ids = encode_chars(text, vocab)
    split = int(0.9 * len(ids))
    train_ids, val_ids = ids[:split], ids[split:]
    config = LMConfig(vocab_size=len(vocab), **LM_CONFIG)
    params, history = train_lm(config, train_ids, val_ids, **RECIPES["train_lm"], seed=seed)
    numbers = {"val_loss": history["val_loss"],
               "bigram": baseline_loss(bigram_log_probs(train_ids, len(vocab)), val_ids),
               "floor": _grammar_entropy_per_char(text, 3000)}

    def last_row(prefix: str) -> torch.Tensor:
        with torch.no_grad():
            return lm_forward(params, encode_chars(prefix, vocab)[None], config)[0, -1]

    numbers["p_s"] = {prefix: last_row(prefix).softmax(-1)[vocab["s"]].item() for prefix in PREFIXES}
    numbers["heads_on_subject_space"] = _heads_on_subject_space(params, config, vocab, val_ids)
    # b2: the logits after the prompt and after "the small b" (sections 1-6), every character's.
    numbers["chars"] = chars
    numbers["logits_after_prompt"] = last_row(PROMPT).tolist()
    numbers["logits_after_b"] = last_row(PROMPT + "b").tolist()
    with torch.no_grad():
        prompt = encode_chars(PROMPT, vocab)[None]
        ten = prompt.expand(10, -1)
        words = grammar_words()
        samples = {name: [decode_chars(row[10:], vocab) for row in generate(
            params, ten, config, 22, generator=torch.Generator().manual_seed(1), **options)]
            for name, options in SAMPLING.items()}
        numbers["non_words"] = {name: claims.count_non_words(t, words) for name, t in samples.items()}
        numbers["words"] = {name: claims.count_words(t) for name, t in samples.items()}
        restarted = _restarting_positions(params, ten, config, 22, 0.5, torch.Generator().manual_seed(1))
        numbers["non_words_positions_restarting"] = claims.count_non_words(
            [decode_chars(row[10:], vocab) for row in restarted], words)

        batch = prompt.expand(3, -1)
        numbers["same_tokens_with_cache"] = [torch.equal(*[generate(
            params, batch, config, 22, temperature=1.5, top_p=0.95, use_cache=use_cache,
            generator=torch.Generator().manual_seed(s)) for use_cache in (True, False)]) for s in range(3)]
        _, caches = lm_step(params, prompt[:, :-1], config)
        step_logits, _ = lm_step(params, prompt[:, -1:], config, caches)
        rolled = params["position_embedding"].roll(9, dims=0)
        wrong_logits, _ = lm_step({**params, "position_embedding": rolled}, prompt[:, -1:], config, caches)
        numbers["restart_error"] = (wrong_logits - step_logits).abs().max().item()

        greedy = generate(params, prompt, config, max_new_tokens=22, greedy=True)
        cold = generate(params, prompt, config, 22, temperature=0.01, generator=torch.Generator().manual_seed(0))
        numbers["cold_same_as_greedy"] = torch.equal(cold, greedy)
        # the gap between the two largest logits at each step of the greedy text
        top_two = lm_forward(params, greedy[:, :-1], config)[0, len(PROMPT) - 1:].topk(2).values  # (22, 2)
        numbers["greedy_top_gaps"] = (top_two[:, 0] - top_two[:, 1]).tolist()
        long = generate(params, prompt, config, 70, greedy=True)
        by_hand = prompt
        for _ in range(70):
            next_id = greedy_next_token(lm_forward(params, by_hand[:, -config.max_len:], config)[:, -1])
            by_hand = torch.cat([by_hand, next_id[:, None]], dim=1)
        numbers["sliding_window_same"] = torch.equal(long, by_hand)
    return numbers


def _heads_on_subject_space(params, config, vocab, val_ids) -> list[list[float]]:
    """b1, section 9: per block and head, the share of validation sentences in which the row
    choosing "s" or a space after the verb puts its largest weight on the space after the subject."""
    sentences = [s + "." for s in decode_chars(val_ids, vocab).split(". ")[1:-1]]
    fitting = [s for s in sentences if len(s) <= config.max_len]
    verbs = VERBS["singular"] + VERBS["plural"]
    hits = torch.zeros(config.num_layers, config.num_heads)
    for sentence in fitting:
        words = sentence[:-1].split()
        verb = next(i for i, w in enumerate(words) if w in verbs)
        subject_end = len(" ".join(words[:verb]))
        number = "singular" if words[verb] in VERBS["singular"] else "plural"
        decides = subject_end + len(VERBS["plural"][VERBS[number].index(words[verb])])
        with torch.no_grad():
            rows = torch.stack(attention_of(params, config, vocab, sentence))[:, :, decides]
        hits += rows.argmax(dim=-1) == subject_end
    return (hits / len(fitting)).tolist()


PARTS = {"reverse": reverse, "lab": lab, "language_model": language_model}

if __name__ == "__main__":
    part, seed = sys.argv[1], int(sys.argv[2])
    print(json.dumps(PARTS[part](seed)))
