"""Wrong input gets a ValueError or TypeError from tfmlib itself, never a bare error from deep
inside torch, and its message names the argument and shows the offending value or shape."""
import math
from pathlib import Path

import pytest
import torch
from torch import nn

import tfmlib
from tfmlib import training

TFMLIB_DIR = Path(tfmlib.__file__).resolve().parent

X = torch.randn(2, 3, 4)                       # (B, L, D) with D = 4
IDS = torch.tensor([[4, 5, 0], [6, 0, 0]])     # (B, L) token ids
VOCAB = tfmlib.build_vocab(["a b"])
NO_UNK = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "a": 3}
MHA = tfmlib.init_mha_params(4)
MHA6 = tfmlib.init_mha_params(6)
FFN = tfmlib.init_ffn_params(4, 8)
NORM = tfmlib.init_norm_params(4)
ENC = tfmlib.init_encoder_layer_params(4, 8)
DEC = tfmlib.init_decoder_layer_params(4, 8)
MEMORY = torch.randn(2, 5, 4)
Q, K, V = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)


def leaf(*shape):
    return torch.zeros(*shape, requires_grad=True)


P1, P2 = leaf(3), leaf(2, 2)
STATE = tfmlib.adam_init([P1, P2])


def without(params, key):
    return {k: v for k, v in params.items() if k != key}


CASES = [
    # ---- tokenization ----
    pytest.param(lambda: tfmlib.tokenize(5), TypeError, ["sentence", "int"], id="tokenize-not-str"),
    pytest.param(lambda: tfmlib.build_vocab("a b"), TypeError, ["sentences", "str"], id="build_vocab-str"),
    pytest.param(lambda: tfmlib.encode("a", NO_UNK), ValueError, ["vocab", "<unk>"], id="encode-no-unk"),
    pytest.param(lambda: tfmlib.encode("a", without(VOCAB, "<bos>"), add_bos=True), ValueError,
                 ["vocab", "<bos>"], id="encode-no-bos"),
    pytest.param(lambda: tfmlib.encode_batch(["a"], without(VOCAB, "<pad>")), ValueError,
                 ["vocab", "<pad>"], id="encode_batch-no-pad"),
    pytest.param(lambda: tfmlib.encode_batch([], VOCAB), ValueError, ["sentences", "empty"],
                 id="encode_batch-empty"),
    pytest.param(lambda: tfmlib.encode_batch("a b", VOCAB), TypeError, ["sentences", "str"],
                 id="encode_batch-str"),
    pytest.param(lambda: tfmlib.pad_batch([], 0), ValueError, ["id_lists", "empty"], id="pad_batch-empty"),
    pytest.param(lambda: tfmlib.pad_batch([[1, 2]], 0, max_len=0), ValueError, ["max_len", "0"],
                 id="pad_batch-max_len"),
    pytest.param(lambda: tfmlib.pad_batch([[1, 2], [1, 2.5]], 0), TypeError, ["id_lists[1]", "2.5"],
                 id="pad_batch-float-ids"),
    pytest.param(lambda: tfmlib.pad_batch([torch.tensor([1.0, 2.0])], 0), TypeError,
                 ["id_lists[0]", "float32"], id="pad_batch-float-tensor"),
    pytest.param(lambda: tfmlib.decode(torch.tensor([4.0, 5.0]), VOCAB), TypeError, ["ids", "float32"],
                 id="decode-float-ids"),
    pytest.param(lambda: tfmlib.decode(torch.tensor([[4, 5]]), VOCAB), ValueError, ["ids", "(1, 2)"],
                 id="decode-2d"),
    pytest.param(lambda: tfmlib.decode([4, 99], VOCAB), ValueError, ["ids", "99"], id="decode-unknown-id"),
    # ---- embeddings ----
    pytest.param(lambda: tfmlib.embed(IDS.float(), torch.randn(7, 4)), TypeError,
                 ["token_ids", "float32"], id="embed-float-ids"),
    pytest.param(lambda: tfmlib.embed(IDS, torch.randn(7, 4, 1)), ValueError, ["table", "(7, 4, 1)"],
                 id="embed-table-rank"),
    pytest.param(lambda: tfmlib.embed(IDS, torch.randn(5, 4)), ValueError, ["token_ids", "6", "[0, 5)"],
                 id="embed-id-out-of-range"),
    pytest.param(lambda: tfmlib.sinusoidal_positional_encoding(5, 7), ValueError, ["d_model", "7"],
                 id="pe-odd-d_model"),
    pytest.param(lambda: tfmlib.sinusoidal_positional_encoding(0, 4), ValueError, ["max_len", "0"],
                 id="pe-max_len-zero"),
    pytest.param(lambda: tfmlib.sinusoidal_positional_encoding(5.0, 4), TypeError, ["max_len", "5.0"],
                 id="pe-max_len-float"),
    pytest.param(lambda: tfmlib.add_positional_encoding(X, torch.randn(2, 4)), ValueError,
                 ["pe", "(2, 4)", "(2, 3, 4)"], id="add_pe-too-short"),
    pytest.param(lambda: tfmlib.add_positional_encoding(X, torch.randn(10, 6)), ValueError,
                 ["pe", "(10, 6)"], id="add_pe-d_model"),
    pytest.param(lambda: tfmlib.add_positional_encoding(X[0], torch.randn(10, 4)), ValueError,
                 ["x", "(3, 4)"], id="add_pe-x-rank"),
    pytest.param(lambda: tfmlib.learned_positional_encoding(-1, 4), ValueError, ["max_len", "-1"],
                 id="learned_pe-negative"),
    pytest.param(lambda: tfmlib.rotate_half_pairs(torch.randn(2, 3)), ValueError, ["x", "(2, 3)"],
                 id="rotate_half-odd"),
    pytest.param(lambda: tfmlib.apply_rope(torch.randn(4)), ValueError, ["x", "(4,)"], id="rope-rank"),
    pytest.param(lambda: tfmlib.apply_rope(torch.randn(3, 5)), ValueError, ["x", "(3, 5)"], id="rope-odd"),
    pytest.param(lambda: tfmlib.apply_rope(torch.ones(3, 4, dtype=torch.long)), TypeError, ["x", "int64"],
                 id="rope-int"),
    pytest.param(lambda: tfmlib.apply_rope(torch.randn(3, 4), torch.arange(4)), ValueError,
                 ["positions", "(4,)", "(3,)"], id="rope-positions-shape"),
    pytest.param(lambda: tfmlib.apply_rope(torch.randn(3, 4), [0, 1, 2]), TypeError, ["positions", "list"],
                 id="rope-positions-list"),
    # ---- masks ----
    pytest.param(lambda: tfmlib.padding_mask(IDS[0], 0), ValueError, ["token_ids", "(3,)"],
                 id="padding_mask-rank"),
    pytest.param(lambda: tfmlib.padding_mask(IDS.float(), 0), TypeError, ["token_ids", "float32"],
                 id="padding_mask-float-ids"),
    pytest.param(lambda: tfmlib.causal_mask(0), ValueError, ["seq_len", "0"], id="causal-zero"),
    pytest.param(lambda: tfmlib.causal_mask(2.0), TypeError, ["seq_len", "2.0"], id="causal-float"),
    pytest.param(lambda: tfmlib.target_mask(IDS.double(), 0), TypeError, ["token_ids", "float64"],
                 id="target_mask-float-ids"),
    # ---- attention ----
    pytest.param(lambda: tfmlib.scaled_dot_product_attention(torch.randn(4), K, V), ValueError,
                 ["query", "(4,)"], id="sdpa-rank"),
    pytest.param(lambda: tfmlib.scaled_dot_product_attention(Q.long(), K, V), TypeError,
                 ["query", "int64"], id="sdpa-int-query"),
    pytest.param(lambda: tfmlib.scaled_dot_product_attention(Q, torch.randn(2, 5, 3), V), ValueError,
                 ["key", "(2, 5, 3)", "d_k = 4"], id="sdpa-d_k-mismatch"),
    pytest.param(lambda: tfmlib.scaled_dot_product_attention(Q, K, torch.randn(2, 4, 6)), ValueError,
                 ["value", "(2, 4, 6)", "Lk = 5"], id="sdpa-Lk-mismatch"),
    pytest.param(lambda: tfmlib.scaled_dot_product_attention(Q, torch.randn(3, 5, 4), torch.randn(3, 5, 6)),
                 ValueError, ["query, key, value", "(2, 3, 4)", "(3, 5, 4)"], id="sdpa-batch-mismatch"),
    pytest.param(lambda: tfmlib.scaled_dot_product_attention(Q, K, V, torch.ones(2, 3, 5)), TypeError,
                 ["mask", "float32", "bool"], id="sdpa-float-mask"),
    pytest.param(lambda: tfmlib.scaled_dot_product_attention(Q, K, V, torch.ones(2, 3, 5, dtype=torch.long)),
                 TypeError, ["mask", "int64"], id="sdpa-int-mask"),
    pytest.param(lambda: tfmlib.scaled_dot_product_attention(Q, K, V, torch.ones(2, 3, 4, dtype=torch.bool)),
                 ValueError, ["mask", "(2, 3, 4)", "(2, 3, 5)"], id="sdpa-mask-unbroadcastable"),
    pytest.param(lambda: tfmlib.scaled_dot_product_attention(Q, K, V, torch.ones(4, 2, 3, 5, dtype=torch.bool)),
                 ValueError, ["mask", "(4, 2, 3, 5)"], id="sdpa-mask-too-many-axes"),
    pytest.param(lambda: tfmlib.scaled_dot_product_attention(Q, K, V, [[True]]), TypeError,
                 ["mask", "list"], id="sdpa-mask-list"),
    # ---- multi-head ----
    pytest.param(lambda: tfmlib.linear([1.0, 2.0], torch.randn(3, 2)), TypeError, ["x", "list"],
                 id="linear-x-list"),
    pytest.param(lambda: tfmlib.linear(X, torch.randn(4)), ValueError, ["weight", "(4,)"],
                 id="linear-weight-rank"),
    pytest.param(lambda: tfmlib.linear(X, torch.randn(5, 3)), ValueError, ["weight", "(5, 3)", "(2, 3, 4)"],
                 id="linear-in-features"),
    pytest.param(lambda: tfmlib.split_heads(torch.randn(2, 3, 6), 4), ValueError,
                 ["num_heads", "d_model = 6", "got 4"], id="split_heads-not-divisible"),
    pytest.param(lambda: tfmlib.split_heads(torch.randn(3, 6), 2), ValueError, ["x", "(3, 6)"],
                 id="split_heads-rank"),
    pytest.param(lambda: tfmlib.split_heads(torch.randn(2, 3, 6), 0), ValueError, ["num_heads", "0"],
                 id="split_heads-zero"),
    pytest.param(lambda: tfmlib.split_heads(torch.randn(2, 3, 6), 2.0), TypeError, ["num_heads", "2.0"],
                 id="split_heads-float"),
    pytest.param(lambda: tfmlib.merge_heads(X), ValueError, ["x", "(2, 3, 4)"], id="merge_heads-rank"),
    pytest.param(lambda: tfmlib.multi_head_attention(torch.randn(2, 3, 6), torch.randn(2, 3, 6),
                                                     torch.randn(2, 3, 6), MHA6, 4),
                 ValueError, ["num_heads", "d_model = 6", "got 4"], id="mha-not-divisible"),
    pytest.param(lambda: tfmlib.multi_head_attention(X[0], X, X, MHA, 2), ValueError, ["query", "(3, 4)"],
                 id="mha-query-rank"),
    pytest.param(lambda: tfmlib.multi_head_attention(X, torch.randn(3, 5, 4), torch.randn(3, 5, 4), MHA, 2),
                 ValueError, ["key", "(3, 5, 4)", "batch"], id="mha-key-batch"),
    pytest.param(lambda: tfmlib.multi_head_attention(X, MEMORY, torch.randn(1, 5, 4), MHA, 2), ValueError,
                 ["value", "(1, 5, 4)", "batch"], id="mha-value-batch"),
    pytest.param(lambda: tfmlib.multi_head_attention(X, MEMORY, torch.randn(2, 6, 4), MHA, 2), ValueError,
                 ["value", "(2, 6, 4)", "Lk"], id="mha-value-length"),
    pytest.param(lambda: tfmlib.multi_head_attention(X, torch.randn(2, 5, 3), torch.randn(2, 5, 3), MHA, 2),
                 ValueError, ["key", "(2, 5, 3)", "d_model"], id="mha-key-d_model"),
    pytest.param(lambda: tfmlib.multi_head_attention(X, X, X, MHA, 2, torch.ones(2, 1, 1, 3)), TypeError,
                 ["mask", "float32"], id="mha-float-mask"),
    pytest.param(lambda: tfmlib.multi_head_attention(X, MEMORY, MEMORY, MHA, 2,
                                                     torch.ones(2, 1, 1, 4, dtype=torch.bool)),
                 ValueError, ["mask", "(2, 1, 1, 4)", "(2, 2, 3, 5)"], id="mha-mask-unbroadcastable"),
    pytest.param(lambda: tfmlib.multi_head_attention(X, X, X, without(MHA, "w_o"), 2), ValueError,
                 ["params", "w_o"], id="mha-params-missing"),
    pytest.param(lambda: tfmlib.multi_head_attention(X, X, X, list(MHA.values()), 2), TypeError,
                 ["params", "list"], id="mha-params-list"),
    pytest.param(lambda: tfmlib.init_mha_params(0), ValueError, ["d_model", "0"], id="init_mha-zero"),
    # ---- sublayers ----
    pytest.param(lambda: tfmlib.feed_forward(X, FFN, "tanh"), ValueError, ["activation", "'tanh'", "relu"],
                 id="ffn-unknown-activation"),
    pytest.param(lambda: tfmlib.feed_forward(X, without(FFN, "b_2")), ValueError, ["params", "b_2"],
                 id="ffn-params-missing"),
    pytest.param(lambda: tfmlib.feed_forward(torch.randn(2, 3, 5), FFN), ValueError,
                 ["x (2, 3, 5)", "(8, 4)"], id="ffn-d_model-mismatch"),
    pytest.param(lambda: tfmlib.dropout(X, 1.0), ValueError, ["p", "1.0", "[0, 1)"], id="dropout-p-one"),
    pytest.param(lambda: tfmlib.dropout(X, -0.1), ValueError, ["p", "-0.1"], id="dropout-p-negative"),
    pytest.param(lambda: tfmlib.dropout(X, "0.5"), TypeError, ["p", "'0.5'"], id="dropout-p-str"),
    pytest.param(lambda: tfmlib.dropout([1.0], 0.5), TypeError, ["x", "list"], id="dropout-x-list"),
    pytest.param(lambda: tfmlib.dropout(torch.ones(3, device="meta"), 0.5,
                                        generator=torch.Generator()),
                 ValueError, ["generator", "meta", "cpu"], id="dropout-generator-on-another-device"),
    pytest.param(lambda: tfmlib.layer_norm(IDS, NORM["gamma"], NORM["beta"]), TypeError, ["x", "int64"],
                 id="layer_norm-int"),
    pytest.param(lambda: tfmlib.layer_norm(torch.tensor(1.0), NORM["gamma"], NORM["beta"]), ValueError,
                 ["x", "()"], id="layer_norm-0d"),
    pytest.param(lambda: tfmlib.layer_norm(X, torch.ones(5), NORM["beta"]), ValueError,
                 ["gamma", "(5,)", "(4,)"], id="layer_norm-gamma-shape"),
    pytest.param(lambda: tfmlib.layer_norm(X, NORM["gamma"], None), TypeError, ["beta", "NoneType"],
                 id="layer_norm-beta-none"),
    pytest.param(lambda: tfmlib.residual_sublayer(X, lambda h: h, without(NORM, "beta")), ValueError,
                 ["norm", "beta"], id="residual-norm-missing"),
    pytest.param(lambda: tfmlib.init_ffn_params(4, 0), ValueError, ["d_ff", "0"], id="init_ffn-zero"),
    pytest.param(lambda: tfmlib.init_norm_params(-2), ValueError, ["d_model", "-2"], id="init_norm-negative"),
    # ---- encoder / decoder ----
    pytest.param(lambda: tfmlib.encoder_layer(X[0], ENC, 2), ValueError, ["x", "(3, 4)"],
                 id="encoder_layer-rank"),
    pytest.param(lambda: tfmlib.encoder_layer(X, without(ENC, "norm2"), 2), ValueError, ["params", "norm2"],
                 id="encoder_layer-params-missing"),
    pytest.param(lambda: tfmlib.encoder_layer(X, dict(ENC, ffn=without(FFN, "w_1")), 2), ValueError,
                 ["params", "w_1"], id="encoder_layer-ffn-missing"),
    pytest.param(lambda: tfmlib.encoder_layer(X, ENC, 3), ValueError, ["num_heads", "d_model = 4", "got 3"],
                 id="encoder_layer-not-divisible"),
    pytest.param(lambda: tfmlib.encoder_layer(X, ENC, 2, activation="swish"), ValueError,
                 ["activation", "'swish'"], id="encoder_layer-activation"),
    pytest.param(lambda: tfmlib.encoder_layer(X, ENC, 2, torch.ones(2, 1, 1, 3, dtype=torch.long)), TypeError,
                 ["mask", "int64"], id="encoder_layer-int-mask"),
    pytest.param(lambda: tfmlib.encoder_layer(X, ENC, 2, torch.ones(2, 1, 1, 4, dtype=torch.bool)),
                 ValueError, ["mask", "(2, 1, 1, 4)"], id="encoder_layer-mask-unbroadcastable"),
    pytest.param(lambda: tfmlib.encoder_layer(torch.randn(2, 3, 5), ENC, 1), ValueError,
                 ["x (2, 3, 5)", "(4, 4)"], id="encoder_layer-d_model-mismatch"),
    pytest.param(lambda: tfmlib.decoder_layer(X, MEMORY[0], DEC, 2), ValueError, ["memory", "(5, 4)"],
                 id="decoder_layer-memory-rank"),
    pytest.param(lambda: tfmlib.decoder_layer(X, torch.randn(3, 5, 4), DEC, 2), ValueError,
                 ["memory", "(3, 5, 4)", "batch"], id="decoder_layer-memory-batch"),
    pytest.param(lambda: tfmlib.decoder_layer(X, torch.randn(2, 5, 6), DEC, 2), ValueError,
                 ["memory", "(2, 5, 6)", "d_model"], id="decoder_layer-memory-d_model"),
    pytest.param(lambda: tfmlib.decoder_layer(X, MEMORY, without(DEC, "cross_attn"), 2), ValueError,
                 ["params", "cross_attn"], id="decoder_layer-params-missing"),
    pytest.param(lambda: tfmlib.decoder_layer(X, MEMORY, DEC, 2, torch.ones(1, 1, 3, 3)), TypeError,
                 ["self_mask", "float32"], id="decoder_layer-float-self-mask"),
    pytest.param(lambda: tfmlib.decoder_layer(X, MEMORY, DEC, 2, None, torch.ones(2, 1, 1, 3, dtype=torch.bool)),
                 ValueError, ["memory_mask", "(2, 1, 1, 3)", "(2, 2, 3, 5)"], id="decoder_layer-memory-mask"),
    pytest.param(lambda: tfmlib.decoder_layer(X, MEMORY, DEC, 0), ValueError, ["num_heads", "0"],
                 id="decoder_layer-heads-zero"),
    pytest.param(lambda: tfmlib.encoder(X, [], 2), ValueError, ["layers", "empty"], id="encoder-no-layers"),
    pytest.param(lambda: tfmlib.encoder(X, [ENC], 2, final_norm=without(NORM, "beta")), ValueError,
                 ["final_norm", "beta"], id="encoder-final-norm-missing"),
    pytest.param(lambda: tfmlib.decoder(X, MEMORY, [], 2), ValueError, ["layers", "empty"],
                 id="decoder-no-layers"),
    pytest.param(lambda: tfmlib.decoder(X, MEMORY, [DEC], 2, final_norm={"beta": NORM["beta"]}), ValueError,
                 ["final_norm", "gamma"], id="decoder-final-norm-missing"),
    pytest.param(lambda: tfmlib.init_encoder_layer_params(0, 8), ValueError, ["d_model", "0"],
                 id="init_encoder-zero"),
    pytest.param(lambda: tfmlib.init_decoder_layer_params(4, -8), ValueError, ["d_ff", "-8"],
                 id="init_decoder-d_ff"),
    # ---- adam ----
    pytest.param(lambda: tfmlib.adam_init([]), ValueError, ["parameters", "empty"], id="adam_init-empty"),
    pytest.param(lambda: tfmlib.adam_init([torch.zeros(3)]), ValueError, ["parameters[0]", "requires_grad"],
                 id="adam_init-no-grad"),
    pytest.param(lambda: tfmlib.adam_init([P1, [1.0]]), TypeError, ["parameters[1]", "list"],
                 id="adam_init-not-tensor"),
    pytest.param(lambda: tfmlib.adam_step([P1, P2], STATE, lr=-0.1), ValueError, ["lr", "-0.1"],
                 id="adam-negative-lr"),
    pytest.param(lambda: tfmlib.adam_step([P1, P2], STATE, lr=math.nan), ValueError, ["lr", "nan"],
                 id="adam-nan-lr"),
    pytest.param(lambda: tfmlib.adam_step([P1, P2], STATE, lr=0.1, betas=(0.9, 1.0)), ValueError,
                 ["betas[1]", "1.0", "[0, 1)"], id="adam-beta2-one"),
    pytest.param(lambda: tfmlib.adam_step([P1, P2], STATE, lr=0.1, betas=(-0.1, 0.999)), ValueError,
                 ["betas[0]", "-0.1"], id="adam-beta1-negative"),
    pytest.param(lambda: tfmlib.adam_step([P1, P2], STATE, lr=0.1, betas=0.9), ValueError,
                 ["betas", "0.9"], id="adam-betas-not-pair"),
    pytest.param(lambda: tfmlib.adam_step([P1, P2], STATE, lr=0.1, eps=-1e-8), ValueError,
                 ["eps", "-1e-08"], id="adam-negative-eps"),
    pytest.param(lambda: tfmlib.adam_step([P1], STATE, lr=0.1), ValueError, ["state", "1", "2"],
                 id="adam-state-other-params"),
    pytest.param(lambda: tfmlib.adam_step([P1, P2], {}, lr=0.1), ValueError, ["state", "'t'", "'m'"],
                 id="adam-state-missing-keys"),
    pytest.param(lambda: tfmlib.adam_step([P1, P2], [], lr=0.1), TypeError, ["state", "list"],
                 id="adam-state-not-dict"),
    pytest.param(lambda: tfmlib.sgd_step([P1], lr=-1), ValueError, ["lr", "-1"], id="sgd-negative-lr"),
    # ---- shapes, from_torch, training ----
    pytest.param(lambda: tfmlib.broadcast_shape((2, 3), (4,)), ValueError, ["(2, 3)", "(4,)", "3", "4"],
                 id="broadcast_shape"),
    pytest.param(lambda: tfmlib.describe([1, 2], "L"), TypeError, ["x", "list"], id="describe-not-tensor"),
    pytest.param(lambda: tfmlib.describe(X, "B L"), ValueError, ["axes", "'B L'", "3"], id="describe-axes"),
    pytest.param(lambda: tfmlib.trace_shapes("split_heads").__enter__(), TypeError,
                 ["function_names", "'split_heads'"], id="trace_shapes-str"),
    pytest.param(lambda: tfmlib.trace_shapes(["nope"]).__enter__(), ValueError, ["function_names", "'nope'"],
                 id="trace_shapes-unknown"),
    pytest.param(lambda: tfmlib.params_from_torch(nn.Linear(2, 2)), TypeError, ["module", "Linear"],
                 id="params_from_torch-unsupported"),
    pytest.param(lambda: training.make_batch("copy", 2, 1, 3, False, torch.Generator()), ValueError,
                 ["task", "'copy'"], id="make_batch-task"),
    pytest.param(lambda: training.digits_to_ids("3a"), ValueError, ["text", "'3a'"], id="digits_to_ids"),
]


@pytest.mark.parametrize("call, error, needles", CASES)
def test_wrong_input_gets_a_clear_error(call, error, needles):
    with pytest.raises(error) as info:
        call()
    assert type(info.value) is error  # exactly ValueError / TypeError, no subclass from elsewhere
    message = str(info.value)
    for needle in needles:
        assert needle in message, f"{needle!r} missing from the message: {message}"
    raised_in = Path(info.traceback[-1].path).resolve()
    assert TFMLIB_DIR in raised_in.parents, f"raised inside {raised_in}, not by a tfmlib check"


def test_every_public_function_is_exercised_with_wrong_input():
    """A new public function must get a wrong-input case here too."""
    functions = {name for name in tfmlib.__all__ if callable(getattr(tfmlib, name))}
    exercised_ids = {case.id.split("-")[0] for case in CASES}
    aliases = {"adam": "adam_step", "sdpa": "scaled_dot_product_attention", "mha": "multi_head_attention",
               "pe": "sinusoidal_positional_encoding", "add_pe": "add_positional_encoding",
               "learned_pe": "learned_positional_encoding", "rotate_half": "rotate_half_pairs",
               "rope": "apply_rope", "ffn": "feed_forward", "residual": "residual_sublayer",
               "causal": "causal_mask", "init_mha": "init_mha_params", "init_ffn": "init_ffn_params",
               "init_norm": "init_norm_params", "init_encoder": "init_encoder_layer_params",
               "init_decoder": "init_decoder_layer_params", "sgd": "sgd_step"}
    exercised = {aliases.get(name, name) for name in exercised_ids}
    # functions whose every input is valid (or that only forward to a checked one)
    no_wrong_input = {"zero_grad", "invert_vocab"}
    assert functions - no_wrong_input <= exercised, sorted(functions - no_wrong_input - exercised)
