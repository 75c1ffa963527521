"""Bonus notebook b1: a decoder-only (GPT-style) character language model from tfmlib's pieces.

    ids (B, L) -> token + learned position embeddings (B, L, D)
               -> num_layers Pre-LN blocks of causal self-attention and FFN (B, L, D)
               -> final LayerNorm (B, L, D) -> h @ token_embedding^T: logits (B, L, V)

Trained on a corpus of simple sentences generated in code (`make_corpus`), one character
per token, with the course's own Adam; judged by the validation loss and perplexity
against a unigram and a bigram baseline.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ._runcache import cached_run
from ._validation import (require_factory_args, require_float, require_integer_ids, require_keys,
                          require_mask, require_ndim, require_non_negative, require_positive_int,
                          require_tensor, shape_str)
from .adam import adam_init, adam_step, warmup_cosine_lr, warmup_steps_for, zero_grad
from .embeddings import embed, learned_positional_encoding
from .masks import causal_mask
from .multihead import init_mha_params, linear, multi_head_attention
from .sublayers import feed_forward, init_ffn_params, init_norm_params, layer_norm
from .training import parameters

BLOCK_KEYS = ("norm1", "attention", "norm2", "ffn")
LM_KEYS = ("token_embedding", "position_embedding", "blocks", "final_norm")


# ---- the corpus: simple sentences from a small grammar, generated in code -------------------

# A subject's number decides its verb's form ("the small cat sees", "the small cats see"),
# some words away: a bigram model, which sees one character, cannot know it; a model with
# context can. The words are this module's own; the corpus may be shared freely.
DETERMINERS = {"singular": ("the", "a", "one"), "plural": ("the", "two", "some")}
NOUNS = {"singular": ("cat", "dog", "bird", "fox", "girl", "boy"),
         "plural": ("cats", "dogs", "birds", "foxes", "girls", "boys")}
VERBS = {"singular": ("sees", "likes", "chases", "finds"),
         "plural": ("see", "like", "chase", "find")}
ADJECTIVES = ("small", "big", "red", "old")


# English spelling, not a choice of the grammar: "a" becomes "an" before a vowel ("an old cat").
# The next word decides it, so it adds no randomness: the grammar's entropy stays the same.
ARTICLE_BEFORE_VOWEL = {"a": "an"}
VOWELS = "aeiou"


def grammar_words() -> set[str]:
    """Every word the grammar of `make_corpus` can write."""
    groups = (DETERMINERS, NOUNS, VERBS)
    return ({word for group in groups for forms in group.values() for word in forms}
            | set(ADJECTIVES) | set(ARTICLE_BEFORE_VOWEL.values()))


def _noun_phrase(rng: random.Random, number: str) -> str:
    words = [rng.choice(DETERMINERS[number])]
    if rng.random() < 0.5:
        words.append(rng.choice(ADJECTIVES))
    words.append(rng.choice(NOUNS[number]))
    if words[0] in ARTICLE_BEFORE_VOWEL and words[1][0] in VOWELS:   # "a old cat" -> "an old cat"
        words[0] = ARTICLE_BEFORE_VOWEL[words[0]]
    return " ".join(words)


def make_sentence(rng: random.Random) -> str:
    """'the red cats chase a dog.': subject, a verb that agrees with it, object."""
    subject, obj = rng.choice(("singular", "plural")), rng.choice(("singular", "plural"))
    return f"{_noun_phrase(rng, subject)} {rng.choice(VERBS[subject])} {_noun_phrase(rng, obj)}."


def make_corpus(num_sentences: int, seed: int = 0) -> str:
    """`num_sentences` sentences, separated by spaces; the same text for the same seed."""
    require_positive_int("num_sentences", num_sentences)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an int, got {seed!r}")
    rng = random.Random(seed)
    return " ".join(make_sentence(rng) for _ in range(num_sentences))


def build_char_vocab(text: str) -> dict[str, int]:
    """One id per distinct character, in sorted order: ' ' -> 0, '.' -> 1, 'a' -> 2, ..."""
    _check_text("text", text)
    return {char: i for i, char in enumerate(sorted(set(text)))}


def encode_chars(text: str, vocab: dict[str, int]) -> torch.Tensor:
    """str -> (N,) long ids, one per character."""
    _check_text("text", text)
    _check_vocab(vocab)
    unknown = sorted(set(text) - set(vocab))
    if unknown:
        raise ValueError(f"text: characters {unknown} are not in vocab (a char vocabulary has no "
                         f"<unk>: build it from a text that contains them)")
    return torch.tensor([vocab[char] for char in text], dtype=torch.long)


def decode_chars(ids, vocab: dict[str, int]) -> str:
    """(N,) ids (a tensor or a list) -> str."""
    _check_vocab(vocab)
    if isinstance(ids, torch.Tensor):
        ids = require_ndim("ids", ids, 1, "(N,)").tolist()
    if not isinstance(ids, list):
        raise TypeError(f"ids: expected a 1-D tensor or a list of ids, got {type(ids).__name__}")
    chars = {i: char for char, i in vocab.items()}
    bad = [i for i in ids if i not in chars]
    if bad:
        raise ValueError(f"ids: expected ids of vocab, in [0, {len(chars)}), got {bad[:5]}")
    return "".join(chars[i] for i in ids)


def _check_vocab(vocab) -> None:
    if not isinstance(vocab, dict):
        raise TypeError(f"vocab: expected a dict char -> id from build_char_vocab, "
                        f"got {type(vocab).__name__}")


def _check_text(name: str, text) -> None:
    if not isinstance(text, str):
        raise TypeError(f"{name}: expected a str, got {type(text).__name__}")
    if not text:
        raise ValueError(f"{name}: expected a non-empty str, got ''")


# ---- the model --------------------------------------------------------------------------------

@dataclass(frozen=True)
class LMConfig:
    vocab_size: int
    d_model: int = 32
    num_heads: int = 4
    d_ff: int = 128
    num_layers: int = 2
    max_len: int = 32  # the context: the most tokens the model reads at once

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "num_heads", "d_ff", "num_layers", "max_len"):
            require_positive_int(name, getattr(self, name))
        if self.d_model % self.num_heads:
            raise ValueError(f"num_heads: d_model = {self.d_model} must be divisible by num_heads, "
                             f"got {self.num_heads}")


def init_lm_params(config: LMConfig, generator: torch.Generator | None = None,
                   dtype: torch.dtype = torch.float32, device=None) -> dict:
    """Every weight as a leaf tensor with requires_grad, in one nested dict:

    token_embedding (V, D), also the output layer (tied); position_embedding (max_len, D),
    learned; blocks: one {"norm1", "attention", "norm2", "ffn"} per layer, in the layouts of
    init_norm_params, init_mha_params and init_ffn_params; final_norm {"gamma", "beta"}.
    """
    _check_config(config)
    require_factory_args(generator, dtype, device)
    kwargs = dict(generator=generator, dtype=dtype, device=device)
    d = config.d_model
    params = {
        # std 1/sqrt(D): embed() multiplies by sqrt(D), so token vectors start at std 1
        "token_embedding": torch.randn(config.vocab_size, d, **kwargs) / math.sqrt(d),
        "position_embedding": learned_positional_encoding(config.max_len, d, **kwargs).detach(),
        "blocks": [{"norm1": init_norm_params(d, dtype, device),
                    "attention": init_mha_params(d, **kwargs),
                    "norm2": init_norm_params(d, dtype, device),
                    "ffn": init_ffn_params(d, config.d_ff, **kwargs)}
                   for _ in range(config.num_layers)],
        "final_norm": init_norm_params(d, dtype, device),
    }
    for p in parameters(params):
        p.requires_grad_()
    return params


def decoder_block(x: torch.Tensor, block: dict, num_heads: int,
                  mask: torch.Tensor | None = None) -> torch.Tensor:
    """(B, L, D) -> (B, L, D): one Pre-LN block, causal self-attention then FFN.

        x = x + attention(LayerNorm1(x))      x = x + FFN(LayerNorm2(x))

    `mask` says which key each query may look at, as in tfmlib.masks: bool, True = may
    attend, broadcasting to (B, H, L, L). None means causal_mask(L): position i sees 0..i.
    A mask you pass replaces it, so keep it causal: causal_mask(L) & padding_mask(...),
    or target_mask(ids, pad_id). This is nn.TransformerEncoderLayer(norm_first=True) given
    a causal mask: a decoder-only block is an encoder layer that cannot see the future.
    """
    _check_decoder_block_inputs(x, block, num_heads, mask)
    if mask is None:
        mask = causal_mask(x.size(1), device=x.device)                         # (1, 1, L, L)
    h = layer_norm(x, block["norm1"]["gamma"], block["norm1"]["beta"])         # (B, L, D)
    x = x + multi_head_attention(h, h, h, block["attention"], num_heads, mask)[0]
    h = layer_norm(x, block["norm2"]["gamma"], block["norm2"]["beta"])         # (B, L, D)
    return x + feed_forward(h, block["ffn"])                                   # (B, L, D)


def lm_forward(params: dict, ids: torch.Tensor, config: LMConfig) -> torch.Tensor:
    """(B, L) ids, L <= config.max_len -> logits (B, L, V); row t scores the token after ids[:, t]."""
    _check_lm_forward_inputs(params, ids, config)
    length = ids.size(1)
    x = embed(ids, params["token_embedding"]) + params["position_embedding"][:length]  # (B, L, D)
    mask = causal_mask(length, device=ids.device)                                      # (1, 1, L, L)
    for block in params["blocks"]:
        x = decoder_block(x, block, config.num_heads, mask)                            # (B, L, D)
    h = layer_norm(x, params["final_norm"]["gamma"], params["final_norm"]["beta"])      # (B, L, D)
    return linear(h, params["token_embedding"])  # tied: h @ token_embedding^T, (B, L, V)


def lm_loss(params: dict, ids: torch.Tensor, config: LMConfig) -> torch.Tensor:
    """(B, L) ids -> scalar: the mean cross-entropy of predicting ids[:, 1:] from ids[:, :-1].

    Every position is a training example: the logits at t are scored against the token
    at t + 1. L may be config.max_len + 1 (the model then reads max_len tokens).
    """
    _check_lm_loss_inputs(ids)
    inputs, targets = ids[:, :-1], ids[:, 1:]                              # (B, L-1) each
    logits = lm_forward(params, inputs, config)                            # (B, L-1, V)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


@torch.no_grad()  # weights to look at, not to train
def lm_attention_weights(params: dict, ids: torch.Tensor, config: LMConfig) -> list[torch.Tensor]:
    """(B, L) ids -> the attention weights of every block, a list of (B, H, L, L)."""
    _check_lm_forward_inputs(params, ids, config)
    length = ids.size(1)
    x = embed(ids, params["token_embedding"]) + params["position_embedding"][:length]  # (B, L, D)
    mask = causal_mask(length, device=ids.device)
    weights = []
    for block in params["blocks"]:
        h = layer_norm(x, block["norm1"]["gamma"], block["norm1"]["beta"])  # what attention reads
        weights.append(multi_head_attention(h, h, h, block["attention"], config.num_heads, mask)[1])
        x = decoder_block(x, block, config.num_heads, mask)
    return weights


def _check_config(config) -> None:
    if not isinstance(config, LMConfig):
        raise TypeError(f"config: expected an LMConfig, got {type(config).__name__}")


def _check_decoder_block_inputs(x, block, num_heads, mask) -> None:
    require_ndim("x", x, 3, "(B, L, d_model)")
    require_float("x", x)
    require_keys("block", block, BLOCK_KEYS)
    require_positive_int("num_heads", num_heads)
    require_mask("mask", mask, (x.size(0), num_heads, x.size(1), x.size(1)), "(B, H, L, L)")


def _check_ids(name: str, ids, config: LMConfig, max_len: int) -> None:
    require_ndim(name, ids, 2, "(B, L)")
    require_integer_ids(name, ids)
    if ids.size(1) > max_len:  # the position table has config.max_len rows
        raise ValueError(f"{name}: expected at most {max_len} tokens per row (config.max_len = "
                         f"{config.max_len}), got shape {shape_str(ids)}")
    if ids.numel() and (ids.min() < 0 or ids.max() >= config.vocab_size):
        raise ValueError(f"{name}: expected ids in [0, {config.vocab_size}) (config.vocab_size), "
                         f"got min {int(ids.min())}, max {int(ids.max())}")


def _check_lm_forward_inputs(params, ids, config) -> None:
    _check_config(config)
    require_keys("params", params, LM_KEYS)
    _check_ids("ids", ids, config, config.max_len)
    table = require_ndim("params['token_embedding']", params["token_embedding"], 2, "(V, D)")
    if table.shape != (config.vocab_size, config.d_model):
        raise ValueError(f"params['token_embedding']: expected shape ({config.vocab_size}, "
                         f"{config.d_model}) from config, got {shape_str(table)}")


def _check_lm_loss_inputs(ids) -> None:
    require_ndim("ids", ids, 2, "(B, L)")
    if ids.size(1) < 2:  # one token leaves nothing to predict
        raise ValueError(f"ids: expected at least 2 tokens per row (one to read, one to predict), "
                         f"got shape {shape_str(ids)}")


# ---- evaluation: the model's loss on a whole text, and two baselines --------------------------

@torch.no_grad()
def lm_eval_loss(params: dict, ids: torch.Tensor, config: LMConfig) -> float:
    """(N,) ids of a text -> mean cross-entropy (nats per character) over every ids[1:].

    The text is cut into windows of max_len + 1 that share one token with the next, so that
    each ids[t], t >= 1, is predicted exactly once, from the up to max_len tokens before it
    in its window: the same targets as baseline_loss scores.
    """
    _check_stream("ids", ids)
    _check_config(config)
    step = config.max_len
    full = (ids.numel() - 1) // step                 # windows with all max_len targets
    total = 0.0
    if full:
        windows = ids[: full * step + 1].unfold(0, step + 1, step)          # (full, max_len + 1)
        total += lm_loss(params, windows, config).item() * full * step
    rest = ids[full * step:]                         # a shorter last window, if any
    if rest.numel() >= 2:
        total += lm_loss(params, rest[None], config).item() * (rest.numel() - 1)
    return total / (ids.numel() - 1)


def perplexity(loss) -> float:
    """exp(loss): the number of equally likely choices the model is as unsure as."""
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        loss = loss.item()
    if isinstance(loss, bool) or not isinstance(loss, (int, float)):
        raise TypeError(f"loss: expected a number (a mean cross-entropy in nats), got {loss!r}")
    return math.exp(loss)


def unigram_log_probs(ids: torch.Tensor, vocab_size: int, smoothing: float = 1.0) -> torch.Tensor:
    """(N,) training ids -> (V,) log P(c): how often each character occurs, context ignored.

    `smoothing` is added to every count (add-one by default), so an unseen character is
    unlikely, not impossible (an impossible one would give an infinite loss).
    """
    _check_counts_inputs(ids, vocab_size, smoothing)
    counts = torch.bincount(ids, minlength=vocab_size).double() + smoothing      # (V,)
    return (counts / counts.sum()).log()


def bigram_log_probs(ids: torch.Tensor, vocab_size: int, smoothing: float = 1.0) -> torch.Tensor:
    """(N,) training ids -> (V, V) log P(next | previous): row = previous character."""
    _check_counts_inputs(ids, vocab_size, smoothing)
    pairs = ids[:-1] * vocab_size + ids[1:]                                      # (N-1,)
    counts = torch.bincount(pairs, minlength=vocab_size ** 2).double()
    counts = counts.reshape(vocab_size, vocab_size) + smoothing                   # (V, V)
    return (counts / counts.sum(dim=1, keepdim=True)).log()


def baseline_loss(log_probs: torch.Tensor, ids: torch.Tensor) -> float:
    """Mean cross-entropy of a unigram (V,) or bigram (V, V) table over every ids[1:] of (N,)."""
    _check_baseline_inputs(log_probs, ids)
    if log_probs.dim() == 1:
        return -log_probs[ids[1:]].mean().item()
    return -log_probs[ids[:-1], ids[1:]].mean().item()


def _check_stream(name: str, ids) -> None:
    require_ndim(name, ids, 1, "(N,) of token ids, a whole text")
    require_integer_ids(name, ids)
    if ids.numel() < 2:
        raise ValueError(f"{name}: expected at least 2 ids (one to read, one to predict), "
                         f"got shape {shape_str(ids)}")


def _check_counts_inputs(ids, vocab_size, smoothing) -> None:
    _check_stream("ids", ids)
    require_positive_int("vocab_size", vocab_size)
    if ids.min() < 0 or ids.max() >= vocab_size:
        raise ValueError(f"ids: expected ids in [0, {vocab_size}) (vocab_size), "
                         f"got min {int(ids.min())}, max {int(ids.max())}")
    require_non_negative("smoothing", smoothing)


def _check_baseline_inputs(log_probs, ids) -> None:
    require_tensor("log_probs", log_probs, layout="(V,) or (V, V)")
    if log_probs.dim() not in (1, 2):
        raise ValueError(f"log_probs: expected a unigram (V,) or a bigram (V, V) table, "
                         f"got shape {shape_str(log_probs)}")
    _check_stream("ids", ids)
    if ids.min() < 0 or ids.max() >= log_probs.size(0):
        raise ValueError(f"ids: expected ids in [0, {log_probs.size(0)}) (rows of log_probs), "
                         f"got min {int(ids.min())}, max {int(ids.max())}")


# ---- training -----------------------------------------------------------------------------------

def random_windows(ids: torch.Tensor, batch_size: int, length: int,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """(N,) ids of a text -> (batch_size, length): windows starting at random places."""
    _check_stream("ids", ids)
    require_positive_int("batch_size", batch_size)
    require_positive_int("length", length)
    if length > ids.numel():
        raise ValueError(f"length: expected at most {ids.numel()} (the text's length), got {length}")
    starts = torch.randint(0, ids.numel() - length + 1, (batch_size,), generator=generator)  # (B,)
    offsets = torch.arange(length)                                                            # (length,)
    return ids[starts[:, None] + offsets]                                    # (B, length)


@cached_run  # only under `make test` (tfmlib/_runcache.py)
def train_lm(config: LMConfig, train_ids: torch.Tensor, val_ids: torch.Tensor | None = None,
             steps: int = 500, batch_size: int = 16, lr: float = 2e-2, seed: int = 0,
             eval_every: int = 50) -> tuple[dict, dict]:
    """Train with adam_step on random windows of max_len + 1 characters of `train_ids`.

    The learning rate warms up over the first tenth of the steps, then decays as a cosine
    (warmup_cosine_lr). -> (params, history): history["step"], ["loss"] (the training batch's),
    and, when val_ids is given, ["eval_step"], ["val_loss"] (lm_eval_loss) every eval_every steps.
    """
    _check_config(config)
    _check_stream("train_ids", train_ids)
    require_positive_int("steps", steps)
    require_positive_int("eval_every", eval_every)
    generator = torch.Generator().manual_seed(seed)
    params = init_lm_params(config, generator)
    weights = parameters(params)
    state = adam_init(weights)
    history = {"step": [], "loss": [], "eval_step": [], "val_loss": []}
    for step in range(1, steps + 1):
        batch = random_windows(train_ids, batch_size, config.max_len + 1, generator)  # (B, max_len + 1)
        loss = lm_loss(params, batch, config)
        zero_grad(weights)
        loss.backward()
        adam_step(weights, state, lr=warmup_cosine_lr(step, lr, warmup_steps_for(steps), steps))
        history["step"].append(step)
        history["loss"].append(loss.item())
        if val_ids is not None and (step % eval_every == 0 or step == steps):
            history["eval_step"].append(step)
            history["val_loss"].append(lm_eval_loss(params, val_ids, config))
    return params, history
