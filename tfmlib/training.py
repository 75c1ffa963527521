"""Notebook 10: a tiny encoder-decoder built only from tfmlib, trained with the hand-written Adam.

Toy tasks are generated in code: reverse a digit sequence, or write the sum of its digits.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ._runcache import cached_run
from ._validation import (require_float, require_keys, require_min_ndim, require_ndim, require_positive_int,
                          require_same_device, require_size, require_tensor, require_token_id)
from .adam import adam_init, adam_step, warmup_cosine_lr, warmup_steps_for, zero_grad
from .embeddings import add_positional_encoding, embed, sinusoidal_positional_encoding
from .encoder_decoder import (decoder, encoder, init_decoder_layer_params,
                              init_encoder_layer_params, stack_attention_weights)
from .masks import padding_mask, target_mask
from .multihead import linear
from .sublayers import init_norm_params
from .tokenization import BOS, EOS, PAD, build_vocab, decode, pad_batch

DIGITS = "0 1 2 3 4 5 6 7 8 9"
VOCAB = build_vocab([DIGITS])  # <pad>=0 <bos>=1 <eos>=2 <unk>=3, then the digits 4..13
PAD_ID, BOS_ID, EOS_ID = VOCAB[PAD], VOCAB[BOS], VOCAB[EOS]
FIRST_DIGIT_ID = VOCAB["0"]


# ---- toy data -------------------------------------------------------------------------------

def is_held_out(digits: list[int]) -> bool:
    """A fixed ~10 % of all sequences never appear in training: the held-out split."""
    fingerprint = 0
    for d in digits:
        fingerprint = (fingerprint * 31 + d + 1) % 1_000_003
    return fingerprint % 10 == 0


def random_digit_sequences(count: int, min_len: int, max_len: int, held_out: bool,
                           generator: torch.Generator) -> list[list[int]]:
    """`count` random digit lists, all from the training split or all from the held-out split."""
    sequences = []
    while len(sequences) < count:
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=generator))
        digits = torch.randint(0, 10, (length,), generator=generator).tolist()
        if is_held_out(digits) == held_out:
            sequences.append(digits)
    return sequences


def reverse_target(digits: list[int]) -> list[int]:
    return digits[::-1]


def sum_target(digits: list[int]) -> list[int]:
    return [int(c) for c in str(sum(digits))]


TASKS = {"reverse": reverse_target, "sum": sum_target}


def make_batch(task: str, count: int, min_len: int, max_len: int, held_out: bool,
               generator: torch.Generator):
    """-> src (B, Ls) and tgt (B, Lt) id tensors; tgt is <bos> answer <eos>, right-padded."""
    if task not in TASKS:
        raise ValueError(f"task: expected one of {sorted(TASKS)}, got {task!r}")
    sequences = random_digit_sequences(count, min_len, max_len, held_out, generator)
    src = pad_batch([[FIRST_DIGIT_ID + d for d in s] for s in sequences], PAD_ID)
    tgt = pad_batch([[BOS_ID] + [FIRST_DIGIT_ID + d for d in TASKS[task](s)] + [EOS_ID]
                     for s in sequences], PAD_ID)
    return src, tgt


def shift_right(tgt: torch.Tensor):
    """Teacher forcing: the decoder reads tgt[:, :-1] and must predict tgt[:, 1:]."""
    _check_target(tgt)
    return tgt[:, :-1], tgt[:, 1:]


def _check_target(tgt) -> None:
    require_ndim("tgt", tgt, 2, "(B, Lt)")
    if tgt.size(1) < 2:  # one token leaves nothing to predict
        raise ValueError(f"tgt: expected at least 2 tokens per row (<bos> and one to predict), "
                         f"got shape {tuple(tgt.shape)}")


# ---- the model ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = len(VOCAB)
    d_model: int = 32
    num_heads: int = 4
    d_ff: int = 64
    num_layers: int = 1  # one encoder and one decoder layer: enough to reverse 3-10 digits
    max_len: int = 32
    norm_first: bool = True
    dropout_p: float = 0.0
    # Switches for the experiments lab, kept out of the repr (the lab prints what it changes):
    # add the sinusoidal positions to the embeddings (False: the model is order-blind) ...
    positional: bool = field(default=True, repr=False)
    # ... and divide the attention scores by sqrt(d_k) (False: softmax(Q K^T) V).
    scale_scores: bool = field(default=True, repr=False)

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "num_heads", "d_ff", "num_layers", "max_len"):
            require_positive_int(name, getattr(self, name))
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model: expected a multiple of num_heads = {self.num_heads} "
                             f"(d_model = num_heads * d_k), got {self.d_model}")


MODEL_KEYS = ("embedding", "encoder", "decoder", "encoder_norm", "decoder_norm", "out_bias")


def init_model(config: ModelConfig, generator: torch.Generator | None = None,
               dtype: torch.dtype = torch.float32, device=None) -> dict:
    """Every weight of the model as a leaf tensor with requires_grad, in one nested dict."""
    kwargs = dict(generator=generator, dtype=dtype, device=device)
    d = config.d_model
    params = {
        "embedding": torch.randn(config.vocab_size, d, **kwargs) / math.sqrt(d),
        "encoder": [init_encoder_layer_params(d, config.d_ff, **kwargs)
                    for _ in range(config.num_layers)],
        "decoder": [init_decoder_layer_params(d, config.d_ff, **kwargs)
                    for _ in range(config.num_layers)],
        "encoder_norm": init_norm_params(d, dtype, device),
        "decoder_norm": init_norm_params(d, dtype, device),
        "out_bias": torch.zeros(config.vocab_size, dtype=dtype, device=device),
    }
    for p in parameters(params):
        p.requires_grad_()
    return params


def parameters(params) -> list[torch.Tensor]:
    """Flatten a nested dict/list of tensors into the list the optimizer steps."""
    if isinstance(params, torch.Tensor):
        return [params]
    values = params.values() if isinstance(params, dict) else params
    return [p for value in values if value is not None for p in parameters(value)]


def positional_table(max_len: int, d_model: int, dtype: torch.dtype = torch.float32,
                     device=None) -> torch.Tensor:
    """The model's sinusoidal table (max_len, D), made once and then reused by every forward
    pass and every step of greedy decoding of every model of this size, dtype and device.

    It is fixed, not learned, so it is kept beside `params`, not in them: `parameters` (and so
    Adam) never sees it, nor does a check comparing the gradient that reaches every tensor of
    `params`. It is shared: read it, never change it in place.
    """
    return _positional_table(max_len, d_model, dtype, torch.device("cpu" if device is None else device))


@functools.lru_cache(maxsize=16)
def _positional_table(max_len: int, d_model: int, dtype: torch.dtype, device: torch.device):
    return sinusoidal_positional_encoding(max_len, d_model, dtype=dtype, device=device)


def embed_with_positions(params: dict, ids: torch.Tensor, config: ModelConfig) -> torch.Tensor:
    """ids (B, L) -> token vectors plus sinusoidal positions (B, L, D); source and target alike."""
    table = params["embedding"]                                               # (V, D)
    if not config.positional:
        return embed(ids, table)
    pe = positional_table(config.max_len, config.d_model, table.dtype, table.device)
    return add_positional_encoding(embed(ids, table), pe)


def encode_source(params: dict, src: torch.Tensor, config: ModelConfig, training: bool = False):
    """src ids (B, Ls) -> memory (B, Ls, D), and the source padding mask (B, 1, 1, Ls)."""
    x = embed_with_positions(params, src, config)                             # (B, Ls, D)
    src_mask = padding_mask(src, PAD_ID)                                      # (B, 1, 1, Ls)
    memory = encoder(x, attention_layers(params, "encoder", config), config.num_heads, src_mask,
                     final_norm=params["encoder_norm"], **_options(config, training))
    return memory, src_mask


def decode_target(params: dict, tgt_in: torch.Tensor, memory: torch.Tensor,
                  src_mask: torch.Tensor, config: ModelConfig, training: bool = False):
    """tgt_in ids (B, Lt), memory (B, Ls, D) -> logits (B, Lt, V)."""
    y = embed_with_positions(params, tgt_in, config)                          # (B, Lt, D)
    hidden = decoder(y, memory, attention_layers(params, "decoder", config), config.num_heads,
                     self_mask=target_mask(tgt_in, PAD_ID), memory_mask=src_mask,
                     final_norm=params["decoder_norm"], **_options(config, training))
    return linear(hidden, params["embedding"], params["out_bias"])  # tied weights: (B, Lt, V)


def forward(params: dict, src: torch.Tensor, tgt_in: torch.Tensor, config: ModelConfig,
            training: bool = False) -> torch.Tensor:
    """(B, Ls) source ids, (B, Lt) shifted target ids -> logits (B, Lt, V)."""
    _check_forward_inputs(params, src, tgt_in, config)
    memory, src_mask = encode_source(params, src, config, training)
    return decode_target(params, tgt_in, memory, src_mask, config, training)


@torch.no_grad()
def attention_maps(params: dict, src: torch.Tensor, tgt_in: torch.Tensor,
                   config: ModelConfig) -> dict:
    """Every attention map of one evaluation forward pass, one entry per layer.

    -> {"encoder": [(B, H, Ls, Ls)], "decoder_self": [(B, H, Lt, Lt)],
        "decoder_cross": [(B, H, Lt, Ls)]}: the stacks of `forward`, with
    stack_attention_weights handing back each layer's weights.
    """
    _check_forward_inputs(params, src, tgt_in, config)
    memory, src_mask = encode_source(params, src, config)                     # (B, Ls, D), (B, 1, 1, Ls)
    x = embed_with_positions(params, src, config)                             # (B, Ls, D)
    y = embed_with_positions(params, tgt_in, config)                          # (B, Lt, D)
    encoder_weights = stack_attention_weights(x, attention_layers(params, "encoder", config),
                                              config.num_heads, src_mask,
                                              norm_first=config.norm_first)
    decoder_weights = stack_attention_weights(y, attention_layers(params, "decoder", config),
                                              config.num_heads,
                                              target_mask(tgt_in, PAD_ID), memory=memory,
                                              memory_mask=src_mask, norm_first=config.norm_first)
    return {"encoder": encoder_weights["self_attn"], "decoder_self": decoder_weights["self_attn"],
            "decoder_cross": decoder_weights["cross_attn"]}


def attention_layers(params: dict, stack: str, config: ModelConfig) -> list[dict]:
    """The layer params of `stack` ("encoder" or "decoder") as the model's attentions use them.

    With config.scale_scores off, every query projection (w_q and b_q) is multiplied by
    sqrt(d_k) here, in the forward pass: then Q' K^T / sqrt(d_k) = Q K^T, the scores without
    the scaling, as a function of the same leaf tensors (so the same gradients reach them).
    This, rather than a `scale` argument threaded through attention, multi-head attention and
    both stacks, leaves those reference functions (and their exercises) as notebooks 05-08 teach them.
    """
    layers = params[stack]
    if config.scale_scores:
        return layers
    factor = math.sqrt(config.d_model // config.num_heads)                    # sqrt(d_k)
    return [{key: _unscaled(value, factor) if key in ("self_attn", "cross_attn") else value
             for key, value in layer.items()} for layer in layers]


def _unscaled(attn: dict, factor: float) -> dict:
    b_q = attn.get("b_q")
    return {**attn, "w_q": attn["w_q"] * factor, "b_q": None if b_q is None else b_q * factor}


def _check_forward_inputs(params, src, tgt_in, config) -> None:
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config: expected a ModelConfig, got {type(config).__name__}")
    require_keys("params", params, MODEL_KEYS)
    require_ndim("src", src, 2, "(B, Ls)")
    require_ndim("tgt_in", tgt_in, 2, "(B, Lt)")
    require_size("tgt_in", tgt_in, 0, src.size(0), "batch size of src")
    for name, ids in (("src", src), ("tgt_in", tgt_in)):
        if ids.size(1) > config.max_len:  # the positional encoding has config.max_len rows
            raise ValueError(f"{name}: expected at most config.max_len = {config.max_len} tokens "
                             f"per row, got shape {tuple(ids.shape)}")


def _options(config: ModelConfig, training: bool) -> dict:
    return dict(norm_first=config.norm_first, dropout_p=config.dropout_p, training=training)


def sequence_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over every non-pad target position: (B, Lt, V), (B, Lt) -> scalar."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                           ignore_index=PAD_ID)


def label_smoothed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, smoothing: float,
                                 ignore_index: int = -100) -> torch.Tensor:
    """Cross-entropy against smoothed targets: (..., V) logits, (...) labels -> scalar.

    The target distribution keeps 1 - smoothing on the label and spreads `smoothing` evenly
    over all V classes, the label included (each gets smoothing / V), as
    F.cross_entropy(..., label_smoothing=smoothing) does. Positions labelled `ignore_index`
    (padding) count neither in the loss nor in the mean; if every position is ignored the
    mean is 0 / 0 = nan, as in PyTorch.
    """
    _check_label_smoothing_inputs(logits, labels, smoothing, ignore_index)
    log_probs = logits.log_softmax(dim=-1)                                        # (..., V)
    kept = labels != ignore_index                                                 # (...)
    safe_labels = labels.masked_fill(~kept, 0)  # any class will do: those rows are dropped below
    target_term = -log_probs.gather(-1, safe_labels.unsqueeze(-1)).squeeze(-1)    # (...)
    uniform_term = -log_probs.mean(dim=-1)      # -sum_c log p_c / V: the smoothing / V part  (...)
    per_position = (1 - smoothing) * target_term + smoothing * uniform_term       # (...)
    return per_position.masked_fill(~kept, 0.0).sum() / kept.sum()


def _check_label_smoothing_inputs(logits, labels, smoothing, ignore_index) -> None:
    require_min_ndim("logits", logits, 1, "(..., V)")
    require_float("logits", logits)
    if logits.size(-1) == 0:
        raise ValueError(f"logits: expected at least one class on the last axis (..., V), "
                         f"got shape {tuple(logits.shape)}")
    require_tensor("labels", labels, layout=f"{tuple(logits.shape[:-1])} of class indices")
    if labels.dtype != torch.long:
        raise TypeError(f"labels: expected class indices of dtype torch.long, got {labels.dtype}")
    if labels.shape != logits.shape[:-1]:
        raise ValueError(f"labels: expected shape {tuple(logits.shape[:-1])} (logits without its "
                         f"class axis), got shape {tuple(labels.shape)}")
    require_same_device("labels", labels, "logits", logits)
    if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)):
        raise TypeError(f"smoothing: expected a float in [0, 1], got {smoothing!r}")
    if not 0.0 <= smoothing <= 1.0:  # also refuses nan
        raise ValueError(f"smoothing: expected a float in [0, 1], got {smoothing}")
    require_token_id("ignore_index", ignore_index)
    scored = labels[labels != ignore_index]
    if scored.numel() and (scored.min() < 0 or scored.max() >= logits.size(-1)):
        raise ValueError(f"labels: expected classes in [0, {logits.size(-1)}) or ignore_index "
                         f"({ignore_index}), got min {int(scored.min())}, max {int(scored.max())}")


# ---- training and decoding ------------------------------------------------------------------

@cached_run  # only under `make test` (tfmlib/_runcache.py)
def train(config: ModelConfig = ModelConfig(), task: str = "reverse", steps: int = 500,
          batch_size: int = 64, lr: float = 2e-2, min_len: int = 3, max_len: int = 10,
          seed: int = 0, eval_every: int = 50, eval_size: int = 200, warmup: bool = True,
          label_smoothing: float = 0.0) -> tuple[dict, dict]:
    """Train with adam_step; -> (params, history of step, loss, held-out exact match).

    warmup=False starts at the peak lr (the cosine decay only); label_smoothing > 0 trains on
    label_smoothed_cross_entropy instead of sequence_loss (the loss in the history is then the
    smoothed one). Both exist for the experiments lab.
    """
    generator = torch.Generator().manual_seed(seed)
    params = init_model(config, generator)
    weights = parameters(params)
    state = adam_init(weights)
    eval_src, eval_tgt = make_batch(task, eval_size, min_len, max_len, True,
                                    torch.Generator().manual_seed(seed + 1))
    history = {"step": [], "loss": [], "eval_step": [], "exact_match": []}
    for step in range(1, steps + 1):
        src, tgt = make_batch(task, batch_size, min_len, max_len, False, generator)
        tgt_in, labels = shift_right(tgt)
        logits = forward(params, src, tgt_in, config, training=True)          # (B, Lt, V)
        loss = (label_smoothed_cross_entropy(logits, labels, label_smoothing, PAD_ID)
                if label_smoothing else sequence_loss(logits, labels))
        zero_grad(weights)
        loss.backward()
        warmup_steps = warmup_steps_for(steps) if warmup else 1  # 1: the first step is at the peak
        adam_step(weights, state, lr=warmup_cosine_lr(step, lr, warmup_steps, steps))
        history["step"].append(step)
        history["loss"].append(loss.item())
        if step % eval_every == 0 or step == steps:
            history["eval_step"].append(step)
            history["exact_match"].append(exact_match(params, eval_src, eval_tgt, config))
    return params, history


@torch.no_grad()
def greedy_decode(params: dict, src: torch.Tensor, config: ModelConfig,
                  max_new_tokens: int | None = None) -> torch.Tensor:
    """(B, Ls) -> (B, Lt) ids starting with <bos>: append the most likely next token each step."""
    if max_new_tokens is None:
        max_new_tokens = config.max_len - 1
    memory, src_mask = encode_source(params, src, config)
    out = torch.full((src.size(0), 1), BOS_ID, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_new_tokens):
        logits = decode_target(params, out, memory, src_mask, config)  # (B, t, V)
        next_id = logits[:, -1].argmax(dim=-1)                          # (B,)
        next_id = next_id.masked_fill(finished, PAD_ID)                 # pad after <eos>
        out = torch.cat([out, next_id[:, None]], dim=1)                 # (B, t + 1)
        finished |= next_id == EOS_ID
        if finished.all():
            break
    return out


def exact_match(params: dict, src: torch.Tensor, tgt: torch.Tensor, config: ModelConfig) -> float:
    """Fraction of sequences whose greedy decoding equals the target exactly."""
    predicted = greedy_decode(params, src, config, max_new_tokens=tgt.size(1) - 1)
    hits = [decode(p, VOCAB) == decode(t, VOCAB) for p, t in zip(predicted, tgt)]
    return sum(hits) / len(hits)


def exact_match_by_length(params: dict, config: ModelConfig, lengths, count: int = 200,
                          seed: int = 7, task: str = "reverse") -> dict[int, float]:
    """{length: exact match} on `count` held-out sequences of exactly that many digits each."""
    accuracy = {}
    for length in lengths:
        src, tgt = make_batch(task, count, length, length, True, torch.Generator().manual_seed(seed))
        accuracy[length] = exact_match(params, src, tgt, config)
    return accuracy


def digits_to_ids(text: str) -> torch.Tensor:
    """"3 1 4" or "314" -> (1, L) source ids."""
    digits = [c for c in text if not c.isspace()]
    if not digits or any(c not in "0123456789" for c in digits):
        raise ValueError(f"text: expected digits like '3 1 4', got {text!r}")
    return torch.tensor([[FIRST_DIGIT_ID + int(c) for c in digits]])
