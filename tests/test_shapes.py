"""Notebook 01: broadcasting rules, describe, and the shape tracer."""
import random

import pytest
import torch

import tfmlib
import tfmlib.attention
import tfmlib.encoder_decoder
import tfmlib.multihead
import tfmlib.sublayers
from tfmlib import broadcast_shape, describe, init_encoder_layer_params, trace_shapes


def random_shape_pairs(count, seed=0):
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        a = tuple(rng.choice([0, 1, 1, 2, 3, 5]) for _ in range(rng.randint(0, 4)))
        if rng.random() < 0.5:  # often compatible by construction: b takes a's sizes, or 1
            b = tuple(rng.choice([s, 1]) for s in a[rng.randint(0, len(a)):])
            b = tuple(rng.choice([1, 2]) for _ in range(rng.randint(0, 2))) + b
        else:
            b = tuple(rng.choice([0, 1, 2, 3, 5]) for _ in range(rng.randint(0, 4)))
        pairs.append((a, b))
    return pairs


def test_broadcast_shape_agrees_with_torch_on_many_random_pairs():
    agreed = failed = 0
    for a, b in random_shape_pairs(600):
        try:
            expected = tuple(torch.broadcast_shapes(a, b))
        except RuntimeError:
            expected = None
        if expected is None:
            with pytest.raises(ValueError):
                broadcast_shape(a, b)
            failed += 1
        else:
            assert broadcast_shape(a, b) == expected, (a, b)
            assert broadcast_shape(b, a) == expected, (b, a)
            agreed += 1
    assert agreed > 100 and failed > 100  # both outcomes were really exercised


@pytest.mark.parametrize("a, b, expected", [((2, 1, 4), (3, 1), (2, 3, 4)), ((), (5,), (5,)),
                                            ((0,), (1,), (0,)), ((1, 1), (1,), (1, 1)),
                                            (torch.Size([3, 1]), [1, 7], (3, 7))])
def test_broadcast_shape_examples(a, b, expected):
    assert broadcast_shape(a, b) == expected


def test_broadcast_error_names_the_clashing_axis_and_sizes():
    with pytest.raises(ValueError) as info:
        broadcast_shape((2, 3, 4), (5, 4))
    message = str(info.value)
    assert "(2, 3, 4)" in message and "(5, 4)" in message
    assert "-2" in message and "3" in message and "5" in message


def test_describe_names_each_axis():
    assert describe(torch.zeros(2, 5, 8), "B L D") == "(B=2, L=5, D=8) float32"
    assert describe(torch.zeros(3, dtype=torch.long), "L") == "(L=3) int64"


# ---- trace_shapes ---------------------------------------------------------------------------

TRACED = ["encoder_layer", "multi_head_attention", "split_heads", "scaled_dot_product_attention",
          "merge_heads", "layer_norm", "feed_forward"]


def originals():
    return {(module.__name__, name): getattr(module, name)
            for module in (tfmlib, tfmlib.encoder_decoder, tfmlib.multihead, tfmlib.attention,
                           tfmlib.sublayers)
            for name in TRACED if hasattr(module, name)}


def assert_restored(before):
    for (module_name, name), function in before.items():
        module = __import__(module_name, fromlist=["_"])
        assert getattr(module, name) is function, f"{module_name}.{name} still patched"


def test_trace_shapes_records_nested_calls_of_a_real_encoder_layer_forward():
    before = originals()
    batch, length, d_model, heads = 2, 5, 6, 3
    params = init_encoder_layer_params(d_model, 10, generator=torch.Generator().manual_seed(0))
    x = torch.randn(batch, length, d_model)
    with trace_shapes(TRACED) as trace:
        out = tfmlib.encoder_layer(x, params, heads)
    assert_restored(before)
    torch.testing.assert_close(out, tfmlib.encoder_layer(x, params, heads))  # tracing changed nothing

    # Post-LN encoder layer: attention sublayer, LayerNorm, FFN sublayer, LayerNorm
    expected = [(0, "encoder_layer", "(2, 5, 6)"),
                (1, "multi_head_attention", "(2, 5, 6)"),
                (2, "split_heads", "(2, 3, 5, 2)"),
                (2, "split_heads", "(2, 3, 5, 2)"),
                (2, "split_heads", "(2, 3, 5, 2)"),
                (2, "scaled_dot_product_attention", "(2, 3, 5, 2), (2, 3, 5, 5)"),
                (2, "merge_heads", "(2, 5, 6)"),
                (1, "layer_norm", "(2, 5, 6)"),
                (1, "feed_forward", "(2, 5, 6)"),
                (1, "layer_norm", "(2, 5, 6)")]
    assert [(depth, name) for depth, name, _, _ in trace.rows] == [(d, n) for d, n, _ in expected]
    for (_, _, inputs, output), (_, name, expected_output) in zip(trace.rows, expected):
        assert expected_output in output, (name, output)
        assert "(2, 5, 6)" in inputs or "(2, 3, 5, 2)" in inputs, (name, inputs)
    assert "(2, 5, 6), (2, 3, 5, 5)" in trace.rows[1][3]  # MHA returns output and weights

    table = trace.table()
    assert "encoder_layer" in table.splitlines()[1]
    assert "    split_heads" in table  # nested two levels: indented


def test_trace_shapes_restores_the_functions_after_an_error_in_the_block():
    before = originals()
    with pytest.raises(ValueError):
        with trace_shapes(["split_heads", "multi_head_attention"]):
            tfmlib.split_heads(torch.zeros(1, 2, 6), 4)  # 6 is not divisible by 4
    assert_restored(before)


def test_trace_shapes_unknown_name_is_an_error_and_patches_nothing():
    before = originals()
    with pytest.raises(ValueError, match="not_a_function"):
        with trace_shapes(["split_heads", "layer_norm", "not_a_function"]):
            pass
    assert_restored(before)


def test_trace_shapes_a_name_listed_twice_is_restored_too():
    before = originals()
    with trace_shapes(["split_heads", "split_heads"]) as trace:
        tfmlib.split_heads(torch.zeros(1, 2, 6), 3)
    assert trace.rows and all(name == "split_heads" for _, name, _, _ in trace.rows)
    assert_restored(before)


def test_trace_shapes_traces_tfmlib_and_leaves_a_learners_function_of_the_same_name_alone():
    import __main__
    calls = []

    def linear(x, weight, bias=None):  # a learner's own function, named like tfmlib's
        calls.append("learner")
        return x @ weight.T

    had = hasattr(__main__, "linear")
    previous = getattr(__main__, "linear", None)
    __main__.linear = linear
    try:
        with trace_shapes(["linear"]) as trace:
            tfmlib.linear(torch.zeros(2, 3), torch.zeros(4, 3))
            __main__.linear(torch.zeros(2, 3), torch.zeros(4, 3))
        assert __main__.linear is linear and calls == ["learner"]
        assert [row[1] for row in trace.rows] == ["linear"]  # tfmlib's call only
    finally:
        if had:
            __main__.linear = previous
        else:
            del __main__.linear
