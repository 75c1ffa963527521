"""tfmlib: the reference implementations of the course, one module per notebook.

Everything a notebook needs is importable from the top level:
`from tfmlib import scaled_dot_product_attention`. Plots and widgets live in
`tfmlib.viz` and exercise checks in `tfmlib.exercises`; the math never imports them.
"""
from .shapes import broadcast_shape, describe, trace_shapes
from .tokenization import (PAD, BOS, EOS, UNK, SPECIALS, build_vocab, decode, encode,
                           encode_batch, invert_vocab, pad_batch, tokenize)
from .embeddings import (add_positional_encoding, apply_rope, embed, learned_positional_encoding,
                         rotate_half_pairs, sinusoidal_positional_encoding)
from .masks import causal_mask, padding_mask, target_mask
from .attention import scaled_dot_product_attention
from .multihead import init_mha_params, linear, merge_heads, multi_head_attention, split_heads
from .sublayers import (dropout, feed_forward, init_ffn_params, init_norm_params, layer_norm,
                        residual_sublayer)
from .encoder_decoder import (decoder, decoder_layer, encoder, encoder_layer,
                              init_decoder_layer_params, init_encoder_layer_params,
                              stack_attention_weights)
from .adam import (adam_init, adam_step, adamw_step, clip_grad_norm, sgd_step, warmup_cosine_lr,
                   warmup_inverse_sqrt_lr, zero_grad)
from .from_torch import params_from_torch
from .training import ModelConfig, forward, label_smoothed_cross_entropy, shift_right, train
from .language_model import (LMConfig, baseline_loss, bigram_log_probs, build_char_vocab,
                             decode_chars, decoder_block, encode_chars, init_lm_params,
                             lm_attention_weights, lm_eval_loss, lm_forward, lm_loss, make_corpus,
                             perplexity, random_windows, train_lm, unigram_log_probs)
from .generation import (cached_self_attention, generate, greedy_next_token, lm_step,
                         next_token_probs, sample_next_token, top_k_filter, top_p_filter)

import types as _types

__all__ = [name for name, value in globals().items()
           if not name.startswith("_") and not isinstance(value, _types.ModuleType)]
