"""label_smoothed_cross_entropy against F.cross_entropy(label_smoothing=..., ignore_index=...).

Random logits of awkward sizes in float64, every smoothing from none to all, ignored positions
or none, values and gradients; then the edge cases (every position ignored, huge logits) and
the errors a caller gets for bad input.
"""
import pytest
import torch
import torch.nn.functional as F

from tfmlib.training import PAD_ID, label_smoothed_cross_entropy

SHAPES = [(7,), (3, 5), (2, 3, 4)]           # the label shape (...); logits add V at the end
SMOOTHINGS = [0.0, 0.1, 0.5, 1.0]


def _inputs(shape, vocab, gen, ignore_index=-100, ignored_share=0.0, device="cpu",
            dtype=torch.float64):
    logits = (3 * torch.randn(*shape, vocab, generator=gen, dtype=dtype)).to(device)
    labels = torch.randint(0, vocab, shape, generator=gen)
    dropped = torch.rand(shape, generator=gen) < ignored_share
    dropped.view(-1)[0] = ignored_share > 0   # at least one ignored position when asked for
    dropped.view(-1)[-1] = False               # and at least one scored position
    return logits, labels.masked_fill(dropped, ignore_index).to(device)


def _torch_loss(logits, labels, smoothing, ignore_index=-100):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                           label_smoothing=smoothing, ignore_index=ignore_index)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("smoothing", SMOOTHINGS)
@pytest.mark.parametrize("ignored_share", [0.0, 0.4])
def test_value_and_gradient_match_torch(shape, smoothing, ignored_share, gen, device):
    logits, labels = _inputs(shape, 11, gen, ignored_share=ignored_share, device=device)
    ours_in = logits.clone().requires_grad_()
    torch_in = logits.clone().requires_grad_()
    ours = label_smoothed_cross_entropy(ours_in, labels, smoothing)
    expected = _torch_loss(torch_in, labels, smoothing)
    assert ours.shape == () and ours.dtype == torch.float64
    torch.testing.assert_close(ours, expected)
    # a random upstream gradient, so that a wrong scale of the gradient cannot hide
    upstream = torch.randn((), generator=gen, dtype=torch.float64).to(device)
    (ours * upstream).backward()
    (expected * upstream).backward()
    torch.testing.assert_close(ours_in.grad, torch_in.grad)


@pytest.mark.parametrize("smoothing", SMOOTHINGS)
def test_pad_id_as_ignore_index_like_the_course_model(smoothing, gen):
    """The course's labels are (B, Lt) with <pad> = 0 as the ignored class."""
    logits, labels = _inputs((5, 6), 14, gen, ignore_index=PAD_ID, ignored_share=0.3)
    assert (labels == PAD_ID).any()
    torch.testing.assert_close(label_smoothed_cross_entropy(logits, labels, smoothing, PAD_ID),
                               _torch_loss(logits, labels, smoothing, PAD_ID))


def test_ignored_positions_change_nothing(gen):
    """Whatever the logits of an ignored position, the loss and the other gradients stay."""
    logits, labels = _inputs((4, 5), 9, gen, ignored_share=0.5)
    loss = label_smoothed_cross_entropy(logits, labels, 0.2)
    noisy = logits.clone()
    noisy[labels == -100] = 100 * torch.randn(noisy[labels == -100].shape, generator=gen,
                                              dtype=noisy.dtype)
    noisy.requires_grad_()
    torch.testing.assert_close(label_smoothed_cross_entropy(noisy, labels, 0.2), loss)
    label_smoothed_cross_entropy(noisy, labels, 0.2).backward()
    assert not noisy.grad[labels == -100].any()


def test_smoothing_zero_is_plain_cross_entropy_and_one_is_the_uniform_term(gen):
    logits, labels = _inputs((6,), 5, gen)
    torch.testing.assert_close(label_smoothed_cross_entropy(logits, labels, 0.0),
                               F.cross_entropy(logits, labels))
    uniform = torch.full_like(logits, 1 / 5)   # every class 1/V, the label included
    torch.testing.assert_close(label_smoothed_cross_entropy(logits, labels, 1.0),
                               F.cross_entropy(logits, uniform))


def test_float32_matches_torch(gen):
    logits, labels = _inputs((3, 7), 13, gen, ignored_share=0.3, dtype=torch.float32)
    ours = label_smoothed_cross_entropy(logits, labels, 0.1)
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, _torch_loss(logits, labels, 0.1))


def test_one_position_with_no_batch_axis(gen):
    """(V,) logits and a 0-d label: (...) may be empty, like F.cross_entropy's unbatched input."""
    logits = torch.randn(6, generator=gen, dtype=torch.float64)
    label = torch.tensor(4)
    torch.testing.assert_close(label_smoothed_cross_entropy(logits, label, 0.3),
                               F.cross_entropy(logits, label, label_smoothing=0.3))


def test_huge_logits_stay_finite_like_torch(gen):
    """A gap of 300 between logits: softmax underflows to 0, log_softmax does not."""
    logits = torch.tensor([[300.0, 0.0, -150.0], [0.0, 300.0, 20.0]])
    labels = torch.tensor([0, 2])
    ours = label_smoothed_cross_entropy(logits, labels, 0.1)
    assert torch.isfinite(ours)
    torch.testing.assert_close(ours, _torch_loss(logits, labels, 0.1))


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_every_position_ignored_gives_nan_and_zero_gradients_like_torch(smoothing, gen):
    """0 / 0: we follow F.cross_entropy (nan loss, zero gradient) rather than invent a value."""
    logits = torch.randn(2, 3, 5, generator=gen, dtype=torch.float64)
    labels = torch.full((2, 3), PAD_ID)
    ours_in, torch_in = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    ours = label_smoothed_cross_entropy(ours_in, labels, smoothing, PAD_ID)
    expected = _torch_loss(torch_in, labels, smoothing, PAD_ID)
    assert torch.isnan(ours) and torch.isnan(expected)
    ours.backward()
    expected.backward()
    assert torch.equal(ours_in.grad, torch_in.grad) and not ours_in.grad.any()


def test_no_position_at_all_gives_nan_like_torch():
    logits, labels = torch.zeros(0, 4), torch.zeros(0, dtype=torch.long)
    assert torch.isnan(label_smoothed_cross_entropy(logits, labels, 0.1))
    assert torch.isnan(_torch_loss(logits, labels, 0.1))


def test_arguments_are_left_as_they_came(gen):
    logits, labels = _inputs((3, 4), 6, gen, ignored_share=0.5)
    logits_before, labels_before = logits.clone(), labels.clone()
    label_smoothed_cross_entropy(logits, labels, 0.1)
    assert torch.equal(logits, logits_before) and torch.equal(labels, labels_before)


@pytest.mark.parametrize("call, error, words", [
    (lambda x, y: label_smoothed_cross_entropy(x, y[:, :-1], 0.1), ValueError,
     ["labels", "(2, 3)", "(2, 2)"]),
    (lambda x, y: label_smoothed_cross_entropy(x, y.int(), 0.1), TypeError, ["labels", "torch.long"]),
    (lambda x, y: label_smoothed_cross_entropy(x.long(), y, 0.1), TypeError, ["logits", "floating"]),
    (lambda x, y: label_smoothed_cross_entropy(x, y, 1.5), ValueError, ["smoothing", "[0, 1]", "1.5"]),
    (lambda x, y: label_smoothed_cross_entropy(x, y, -0.1), ValueError, ["smoothing", "-0.1"]),
    (lambda x, y: label_smoothed_cross_entropy(x, y, "0.1"), TypeError, ["smoothing", "'0.1'"]),
    (lambda x, y: label_smoothed_cross_entropy(x, y + 3, 0.1), ValueError, ["labels", "[0, 5)", "max 7"]),
    (lambda x, y: label_smoothed_cross_entropy(x, y - 1, 0.1, ignore_index=-100), ValueError,
     ["labels", "min -1"]),
    (lambda x, y: label_smoothed_cross_entropy(x, y, 0.1, ignore_index=0.0), TypeError, ["ignore_index"]),
    (lambda x, y: label_smoothed_cross_entropy(x[..., :0], y, 0.1), ValueError, ["logits", "class"]),
    (lambda x, y: label_smoothed_cross_entropy(x.tolist(), y, 0.1), TypeError, ["logits"]),
    (lambda x, y: label_smoothed_cross_entropy(x, y.tolist(), 0.1), TypeError, ["labels"]),
])
def test_bad_input_gets_a_clear_error(call, error, words):
    logits = torch.randn(2, 3, 5)
    labels = torch.tensor([[0, 4, 2], [1, 3, 4]])
    with pytest.raises(error) as raised:
        call(logits, labels)
    for word in words:
        assert word in str(raised.value), str(raised.value)


def test_ignored_labels_may_lie_outside_the_classes():
    """-100 (or any ignore_index) is not a class; only the scored labels must be in [0, V)."""
    logits = torch.randn(4, 3)
    labels = torch.tensor([2, -100, 0, -100])
    torch.testing.assert_close(label_smoothed_cross_entropy(logits, labels, 0.2),
                               _torch_loss(logits, labels, 0.2))
