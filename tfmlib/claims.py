"""What the notebooks claim about trained models, written as code that checks it.

A trained model's numbers differ a little from machine to machine: another CPU adds floats in
another order (its SIMD kernels group the sums differently), and hundreds of training steps
amplify the last bit into a visible difference. The same recipe may first reach 99 % at step 350
on one laptop and at step 400 on another. So the notebooks print the numbers of the learner's own
run without quoting them as facts, and state what those numbers show as claims: each function
here turns a run's results into `{claim: holds}`, and `verify` prints the claims and fails loudly
when one does not hold on this machine. tests/test_claims.py runs every claim under other CPU
kernels, thread counts and seeds; a claim that does not hold in all of them is not made.

The thresholds are deliberately loose: a claim says what every run shows, not what one run did.
"""
from __future__ import annotations

import math

from .experiments import summary


class ClaimFailed(AssertionError):
    """A claim of the course did not hold on this machine."""


def verify(claims: dict[str, bool]) -> None:
    """Print each claim with its verdict; raise ClaimFailed naming those that do not hold."""
    for text, holds in claims.items():
        print(f"{'holds' if holds else 'FAILS'}: {text}")
    failed = [text for text, holds in claims.items() if not holds]
    if failed:
        raise ClaimFailed(
            f"{len(failed)} claim(s) of this notebook did not hold on this machine: "
            + "; ".join(failed) + ". The numbers printed above are this run's. Trained results "
            "vary from machine to machine, but each claim was checked under several CPU kernels "
            "and seeds: please report this, with the numbers, to the course's maintainers.")


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def first_step_reaching(history: dict, threshold: float) -> int | None:
    """The first evaluation step whose held-out exact match is at least `threshold`, or None."""
    return next((step for step, match in zip(history["eval_step"], history["exact_match"])
                 if match >= threshold), None)


def _blocks(values, size: int) -> list[float]:
    """The mean of each block of `size` consecutive values (one step's loss is noisy)."""
    return [_mean(values[i:i + size]) for i in range(0, len(values), size)]


# ---- the numbers of one run: what the sweep stores and a notebook compares ----------------------

def reverse_numbers(history: dict) -> dict:
    """Notebook 10, section 5: `train`'s history -> the numbers its claims rest on."""
    loss = history["loss"]
    return {"loss_first": loss[0], "loss_steps_16_25": _mean(loss[15:25]), "loss_last": loss[-1],
            "loss_by_50_steps": _blocks(loss, 50), "exact_match": list(history["exact_match"]),
            "first_step_99": first_step_reaching(history, 0.99)}


def lab_numbers(record: dict) -> dict:
    """Notebook 10, section 9: one experiment's record -> the numbers its claims rest on."""
    return {**summary(record), "exact_match_curve": list(record["exact_match"]),
            "loss_by_10_steps": _blocks(record["loss"], 10)}


def count_words(texts) -> int:
    """How many words `count_non_words` looks at in `texts`."""
    return sum(1 for text in texts for word in text.replace(".", " ").split(" ")[1:-1] if word)


# ---- notebook 10: the reverse task --------------------------------------------------------------

def reverse_training(history: dict, vocab_size: int = 14) -> dict[str, bool]:
    """Section 5: `train`'s history with the notebook's recipe (500 steps, 3 to 10 digits)."""
    loss = history["loss"]
    first = first_step_reaching(history, 0.99)
    return {
        f"the first loss is above ln {vocab_size} = {math.log(vocab_size):.2f}, worse than a "
        "uniform guess": loss[0] > math.log(vocab_size),
        f"around step 20 (steps 16-25) the loss is within 0.4 of ln 10 = {math.log(10):.2f}":
            abs(_mean(loss[15:25]) - math.log(10)) < 0.4,
        "at the end, at least 99 % of the held-out sequences are reversed exactly":
            history["exact_match"][-1] >= 0.99,
        "99 % is first reached after step 200, not at once": first is not None and first > 200,
        "the last training loss is below 0.05": loss[-1] < 0.05,
    }


def reverse_lengths(accuracy: dict[int, float]) -> dict[str, bool]:
    """Question 2: exact match on held-out sequences of 10, 11 and 12 digits (trained on 3-10)."""
    return {
        "10 digits, the longest trained: at least 95 % exactly right": accuracy[10] >= 0.95,
        "11 digits: fewer than half right": accuracy[11] < 0.5,
        "12 digits: fewer than one in ten right": accuracy[12] < 0.1,
    }


# ---- notebook 10: the experiments lab ------------------------------------------------------------

def _seeds(results: dict) -> list[int]:
    return sorted({seed for _, seed in results})


def _final(results: dict, name: str, seed: int) -> float:
    """The last held-out exact match of one run."""
    return results[name, seed]["exact_match"][-1]


def _loss(results: dict, name: str, seed: int, steps: slice = slice(-10, None)) -> float:
    """The mean training loss over `steps` of one run (one step's loss is noisy)."""
    return _mean(results[name, seed]["loss"][steps])


def _on_every_seed(results: dict, holds) -> bool:
    return all(holds(seed) for seed in _seeds(results))


def _higher_loss(results: dict, name: str) -> dict[str, bool]:
    return {f"{name}: a higher loss over the last 10 steps than the baseline, on every seed":
            _on_every_seed(results, lambda s: _loss(results, name, s) > _loss(results, "baseline", s))}


def _fewer_right(results: dict, name: str) -> dict[str, bool]:
    return {f"{name}: fewer sequences exactly right than the baseline, on every seed":
            _on_every_seed(results, lambda s: _final(results, name, s) < _final(results, "baseline", s))}


def lab_no_positions(results: dict) -> dict[str, bool]:
    """Section 9.1."""
    return {**_fewer_right(results, "no positions"), **_higher_loss(results, "no positions"),
            "no positions: still some sequences right (a bag of digits tells which to write)":
                _on_every_seed(results, lambda s: _final(results, "no positions", s) > 0)}


def lab_one_head(results: dict) -> dict[str, bool]:
    """Section 9.2."""
    return {**_fewer_right(results, "1 head"), **_higher_loss(results, "1 head")}


def lab_many_heads(results: dict) -> dict[str, bool]:
    """Section 9.2: 16 heads of d_k = 2 against the baseline's 4 of d_k = 8."""
    return {"16 heads (d_k = 2): a lower loss over the last 10 steps than the baseline (d_k = 8), "
            "on every seed": _on_every_seed(
                results, lambda s: _loss(results, "16 heads", s) < _loss(results, "baseline", s))}


def lab_no_scaling(results: dict) -> dict[str, bool]:
    """Section 9.3: only the loss; in exact answers the gap is within the spread of the seeds."""
    return _higher_loss(results, "no sqrt(d_k)")


def lab_layer_norm(results: dict) -> dict[str, bool]:
    """Section 9.4: Pre-LN and Post-LN, with and without warm-up."""
    names = ["baseline", "Pre-LN, no warm-up", "Post-LN", "Post-LN, no warm-up"]
    early = slice(0, 20)
    return {
        "Pre-LN without warm-up: a lower mean loss over steps 1-20 than with it, on every seed":
            _on_every_seed(results, lambda s: _loss(results, "Pre-LN, no warm-up", s, early)
                           < _loss(results, "baseline", s, early)),
        "no run of the four diverges: every loss over the last 10 steps is below 1":
            all(_loss(results, n, s) < 1 for n in names for s in _seeds(results)),
    }


def lab_learning_rate(results: dict) -> dict[str, bool]:
    """Section 9.5."""
    return {
        "lr x10: the loss over the last 10 steps stays above 1, over the baseline's, on every seed":
            _on_every_seed(results, lambda s: _loss(results, "lr x10", s) > max(
                1.0, _loss(results, "baseline", s))),
        "lr x10: fewer sequences exactly right than the baseline, on every seed": _on_every_seed(
            results, lambda s: _final(results, "lr x10", s) < _final(results, "baseline", s)),
    }


def lab_label_smoothing(results: dict, floor: float) -> dict[str, bool]:
    """Section 9.6; `floor` is the least possible smoothed loss (`smoothed_loss_floor`). No claim
    on the exact match: the gap to the baseline changes sign from seed to seed."""
    name = "label smoothing 0.1"
    return {f"{name}: its loss stays above the floor and above the baseline's loss, on every seed":
            _on_every_seed(results, lambda s: _loss(results, name, s) > max(
                floor, _loss(results, "baseline", s)))}


def lab_shuffled_sum(results: dict) -> dict[str, bool]:
    """Section 9.7: the sum task, with the held-out sources' digits shuffled."""
    return {
        "sum, no positions: every answer unchanged by the shuffle, on every seed": _on_every_seed(
            results, lambda s: results["sum, no positions", s]["unchanged_by_shuffle"] == 1.0),
        "sum, with or without positions: fewer than 10 % of the sums exactly right after 80 steps":
            all(_final(results, n, s) < 0.1 for n in ("sum", "sum, no positions")
                for s in _seeds(results)),
    }


def lab_regressor(results: dict) -> dict[str, bool]:
    """Section 9.8."""
    return {"sum, regressor: more sums exactly right than the encoder-decoder, on every seed":
            _on_every_seed(results, lambda s: _final(results, "sum, regressor", s)
                           > _final(results, "sum", s))}


def lab_sum_without_positions(results: dict) -> dict[str, bool]:
    """Section 9.8: the sum task without positions, for the encoder-decoder and the regressor."""
    return {
        "sum: the loss over the last 10 steps moves by less than 0.25 without positions, on every seed":
            _on_every_seed(results, lambda s: abs(_loss(results, "sum, no positions", s)
                                                  - _loss(results, "sum", s)) < 0.25),
        "sum, regressor: a higher MSE over the last 10 steps without positions, on every seed":
            _on_every_seed(results, lambda s: _loss(results, "sum, regressor, no positions", s)
                           > _loss(results, "sum, regressor", s)),
        "sum, regressor, no positions: every rounded answer unchanged by the shuffle, on every seed":
            _on_every_seed(results, lambda s: results["sum, regressor, no positions", s][
                "unchanged_by_shuffle"] == 1.0),
    }


def lab_regressor_shuffled(results: dict) -> dict[str, bool]:
    """Section 9.8: the regressor with positions, on the held-out sources shuffled."""
    def close(seed):
        record = results["sum, regressor", seed]
        return abs(record["shuffled_mse"] - record["held_out_mse"]) < 0.25 * record["held_out_mse"]

    return {"sum, regressor: its held-out MSE with the digits shuffled is within 25 % of the MSE "
            "in order, on every seed": _on_every_seed(results, close)}


# ---- notebook 10: greedy decoding -----------------------------------------------------------------

def reverse_examples(answers: dict[str, str]) -> dict[str, bool]:
    """Sections 6-7: {source digits: the model's greedy answer} for the held-out examples."""
    return {"the trained model reverses each held-out example of sections 6 and 7 exactly": all(
        answer == " ".join(reversed(source.split())) for source, answer in answers.items())}


# ---- bonus notebook b1: the character language model --------------------------------------------

def language_model_training(history: dict, bigram: float, floor: float) -> dict[str, bool]:
    """Section 8: `train_lm`'s history (validation loss every 100 steps) against the bigram's
    validation loss and the grammar's entropy per character (`floor`)."""
    val = history["val_loss"]
    return {
        "at the first check, step 100, the validation loss is already below the bigram's":
            val[0] < bigram,
        "the validation loss goes down at every check": all(b < a for a, b in zip(val, val[1:])),
        "at the end it is above the grammar's entropy, the floor no model can beat, by less "
        "than 0.25 nats per character": floor < val[-1] < floor + 0.25,
    }


def subject_verb_agreement(p_s: dict[str, float], singular: list[str]) -> dict[str, bool]:
    """Section 8: {prefix ending in a verb's stem: P(next = "s")}; `singular` lists the prefixes
    with a singular subject, whose verb takes the "s" (the others take a space)."""
    right = {prefix: p if prefix in singular else 1 - p for prefix, p in p_s.items()}
    return {"after each prefix the model prefers the right continuation (an s after a singular "
            "subject, not after a plural one), where the bigram gives all four the same odds":
                min(right.values()) > 0.5}


# ---- bonus notebook b2: generation ----------------------------------------------------------------

def next_characters(top: list[str], nouns: list[str]) -> dict[str, bool]:
    """Section 1: the most likely characters after "the small ", as many as there are distinct
    first letters of the grammar's nouns."""
    initials = sorted({noun[0] for noun in nouns})
    return {f"the {len(initials)} most likely characters after 'the small ' are the nouns' first "
            f"letters {', '.join(initials)}": sorted(top[:len(initials)]) == initials}


def count_non_words(texts, words: set[str]) -> int:
    """How many words of `texts` are not in `words`. A sample starts and ends mid-word, so each
    text's first and last words are left out; a full stop ends a word."""
    return sum(word not in words for text in texts
               for word in text.replace(".", " ").split(" ")[1:-1] if word)


def sampling(non_words: dict[str, int]) -> dict[str, bool]:
    """Section 6: {setting: `count_non_words` of its samples}."""
    return {
        "greedy and T = 0.5 write only words of the grammar":
            non_words["greedy"] == non_words["T = 0.5"] == 0,
        "T = 2 writes non-words, more than T = 2 with top-p 0.6":
            non_words["T = 2"] > non_words["T = 2, top-p 0.6"],
        "T = 2 with top-k 3 writes non-words too: three characters are kept even where one fits":
            non_words["T = 2, top-k 3"] > 0,
    }


def kv_cache(same_tokens: list[bool], restart_error: float) -> dict[str, bool]:
    """Section 7: whether cached and uncached generation drew the same tokens (one entry per
    seed), and how far (largest absolute logit) a step moves when its position restarts at 0."""
    return {
        "with and without the cache, the same tokens for every seed": all(same_tokens),
        "a step whose position restarts at 0 moves some logit by more than 0.1": restart_error > 0.1,
    }


def sliding_window(same_as_cropped: bool, length: int, max_len: int) -> dict[str, bool]:
    """Section 7, past the context: whether `generate` wrote the same `length` tokens as a loop
    that runs lm_forward on the last `max_len` tokens at every step."""
    return {f"past {max_len} characters, generate writes what a step-by-step loop writes from the "
            f"last {max_len} characters only ({length} characters in all)":
                same_as_cropped and length > max_len}


def filter_tail(kept_words: set[str], tail: dict[float, float], misfit_after_top_k: bool,
                word_letters: set[str]) -> dict[str, bool]:
    """Section 6: one row where few characters make a word. `tail` {T: the probability of the
    characters that make no word}; `kept_words` what top-k 3 then top-p 0.6 keep at T = 2;
    `misfit_after_top_k` whether top-k 3 keeps a character that makes no word."""
    return {
        "at T = 1 the characters that make no word hold less than 0.05; at T = 2 more than twice "
        "as much": tail[1.0] < 0.05 and tail[2.0] > 2 * tail[1.0],
        "at T = 2, top-k 3 keeps a character that makes no word": misfit_after_top_k,
        "top-p 0.6 then keeps only characters that make a word": kept_words <= word_letters,
    }


def cold_sampling(same_as_greedy: bool, top_probability: float) -> dict[str, bool]:
    """Question 3: sampling at T = 0.01 against greedy decoding."""
    return {"T = 0.01 writes the greedy text": same_as_greedy,
            "at T = 0.01 the most likely character holds more than 0.999": top_probability > 0.999}
