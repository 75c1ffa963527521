"""The label_smoothed_cross_entropy check, judged on answers a learner could write.

Right answers in other styles (a target distribution, a Python loop, logsumexp, torch.where,
float64 inside) must PASS (a wrapper of F.cross_entropy is not the learner's own work: see
tests/test_provenance.py); each catalogued mistake, written the
way a learner would write it (not with the catalogue's own variant), must FAIL and be named;
other wrong answers must FAIL with a readable diagnosis.
"""
import pytest
import torch
import torch.nn.functional as F

from tfmlib.exercises import REGISTRY, check

NAME = "label_smoothed_cross_entropy"


def _passes(answer):
    result = check(NAME, answer)
    assert result.status == "passed", str(result)


def _named(answer, mistake):
    result = check(NAME, answer)
    assert result.status == "mistake" and result.mistake == mistake, str(result)
    return result


def _fails(answer, *words):
    result = check(NAME, answer)
    assert result.status in ("failed", "mistake") and not result, str(result)
    for word in words:
        assert word in str(result), str(result)
    return result


# ---- right answers in many styles --------------------------------------------------------------

def with_target_distribution(logits, labels, smoothing, ignore_index=-100):
    vocab = logits.size(-1)
    kept = labels != ignore_index
    target = torch.full_like(logits, smoothing / vocab)
    target = target.scatter_add(-1, labels.clamp(min=0).unsqueeze(-1),
                                torch.full_like(logits[..., :1], 1 - smoothing))
    loss = -(target * F.log_softmax(logits, dim=-1)).sum(-1)
    return loss[kept].mean()


def with_a_loop(logits, labels, smoothing, ignore_index=-100):
    flat_logits, flat_labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    total, count = 0.0, 0
    for row, label in zip(flat_logits, flat_labels):
        if label.item() == ignore_index:
            continue
        log_p = row - torch.logsumexp(row, dim=0)
        total = total - (1 - smoothing) * log_p[label] - smoothing * log_p.mean()
        count += 1
    return total / count if count else logits.new_tensor(float("nan"))  # nothing kept: nan, as torch


def with_where(logits, labels, smoothing, ignore_index=-100):
    log_p = logits - logits.logsumexp(dim=-1, keepdim=True)
    kept = labels != ignore_index
    safe = torch.where(kept, labels, torch.zeros_like(labels))
    nll = -torch.take_along_dim(log_p, safe[..., None], dim=-1).squeeze(-1)
    smooth = -log_p.sum(-1) / logits.shape[-1]
    loss = torch.where(kept, (1 - smoothing) * nll + smoothing * smooth, torch.zeros_like(nll))
    return loss.sum() / kept.sum()


def in_float64_inside(logits, labels, smoothing, ignore_index=-100):
    x = logits.double()
    one_hot = F.one_hot(labels.masked_fill(labels == ignore_index, 0), x.shape[-1]).double()
    target = (1 - smoothing) * one_hot + smoothing / x.shape[-1]
    per_position = -(target * x.log_softmax(-1)).sum(-1)
    mask = (labels != ignore_index).double()
    return ((per_position * mask).sum() / mask.sum()).to(logits.dtype)


def wrapping_torch(logits, labels, smoothing, ignore_index=-100):
    """PyTorch's own loss: right, but not the learner's work (see tests/test_provenance.py)."""
    return F.cross_entropy(logits.flatten(0, -2), labels.flatten(), label_smoothing=smoothing,
                           ignore_index=ignore_index)


def einsum_style(logits, labels, smoothing, ignore_index=-100):
    log_p = torch.log_softmax(logits, -1)
    kept = (labels != ignore_index).to(logits.dtype)
    one_hot = F.one_hot(labels * (labels != ignore_index), logits.shape[-1]).to(logits.dtype)
    nll = -torch.einsum("...v,...v->...", one_hot, log_p)
    uniform = -log_p.mean(-1)
    return torch.einsum("...,...->", kept, (1 - smoothing) * nll + smoothing * uniform) / kept.sum()


@pytest.mark.parametrize("answer", [with_target_distribution, with_a_loop, with_where,
                                    in_float64_inside, einsum_style])
def test_right_answers_in_other_styles_pass(answer):
    _passes(answer)


# ---- each catalogued mistake, written as a learner would ---------------------------------------

def _log_p_and_kept(logits, labels, ignore_index):
    return logits.log_softmax(-1), labels != ignore_index


def mean_over_every_position(logits, labels, smoothing, ignore_index=-100):
    log_p, kept = _log_p_and_kept(logits, labels, ignore_index)
    nll = -log_p.gather(-1, (labels * kept)[..., None]).squeeze(-1)
    loss = ((1 - smoothing) * nll - smoothing * log_p.mean(-1)) * kept
    return loss.mean()


def smoothing_paid_by_padding(logits, labels, smoothing, ignore_index=-100):
    log_p, kept = _log_p_and_kept(logits, labels, ignore_index)
    nll = -log_p.gather(-1, (labels * kept)[..., None]).squeeze(-1) * kept
    smooth = -log_p.mean(-1)
    return ((1 - smoothing) * nll.sum() + smoothing * smooth.sum()) / kept.sum()


def fairseq_port(logits, labels, smoothing, ignore_index=-100):
    """fairseq's label_smoothed_nll_loss: eps_i = epsilon / (V - 1)."""
    log_p, kept = _log_p_and_kept(logits, labels, ignore_index)
    nll = -log_p.gather(-1, (labels * kept)[..., None]).squeeze(-1)
    smooth = -log_p.sum(-1)
    eps_i = smoothing / (logits.size(-1) - 1)
    loss = (1 - smoothing - eps_i) * nll + eps_i * smooth
    return loss[kept].mean()


def label_left_out(logits, labels, smoothing, ignore_index=-100):
    log_p, kept = _log_p_and_kept(logits, labels, ignore_index)
    one_hot = F.one_hot(labels * kept, logits.size(-1)).bool()
    target = torch.where(one_hot, 1 - smoothing, smoothing / logits.size(-1)).to(log_p.dtype)
    return (-(target * log_p).sum(-1))[kept].mean()


def annotated_transformer_port(logits, labels, smoothing, ignore_index=-100):
    """The Annotated Transformer's LabelSmoothing with nn.KLDivLoss(reduction="sum"), / ntokens."""
    vocab = logits.size(-1)
    x = logits.log_softmax(-1).reshape(-1, vocab)
    target = labels.reshape(-1)
    true_dist = x.detach().clone()
    true_dist.fill_(smoothing / (vocab - 2))
    true_dist.scatter_(1, target.clamp(min=0).unsqueeze(1), 1 - smoothing)
    true_dist[:, ignore_index] = 0
    mask = torch.nonzero(target == ignore_index)
    if mask.dim() > 0:
        true_dist.index_fill_(0, mask.squeeze(), 0.0)
    ntokens = (target != ignore_index).sum()
    return F.kl_div(x, true_dist, reduction="sum") / ntokens


def kl_instead_of_cross_entropy(logits, labels, smoothing, ignore_index=-100):
    vocab = logits.size(-1)
    kept = labels != ignore_index
    target = F.one_hot(labels[kept], vocab) * (1 - smoothing) + smoothing / vocab
    return F.kl_div(logits[kept].log_softmax(-1), target.to(logits.dtype), reduction="batchmean")


def swapped(logits, labels, smoothing, ignore_index=-100):
    log_p, kept = _log_p_and_kept(logits, labels, ignore_index)
    nll = -log_p.gather(-1, (labels * kept)[..., None]).squeeze(-1)
    return (smoothing * nll - (1 - smoothing) * log_p.mean(-1))[kept].mean()


def smoothing_not_over_v(logits, labels, smoothing, ignore_index=-100):
    log_p, kept = _log_p_and_kept(logits, labels, ignore_index)
    nll = -log_p.gather(-1, (labels * kept)[..., None]).squeeze(-1)
    return ((1 - smoothing) * nll - smoothing * log_p.sum(-1))[kept].mean()


def sign_flipped(logits, labels, smoothing, ignore_index=-100):
    log_p, kept = _log_p_and_kept(logits, labels, ignore_index)
    ll = log_p.gather(-1, (labels * kept)[..., None]).squeeze(-1)
    return ((1 - smoothing) * ll + smoothing * log_p.mean(-1))[kept].mean()


def summed(logits, labels, smoothing, ignore_index=-100):
    log_p, kept = _log_p_and_kept(logits, labels, ignore_index)
    nll = -log_p.gather(-1, (labels * kept)[..., None]).squeeze(-1)
    return ((1 - smoothing) * nll - smoothing * log_p.mean(-1))[kept].sum()


def per_sequence(logits, labels, smoothing, ignore_index=-100):
    log_p, kept = _log_p_and_kept(logits, labels, ignore_index)
    nll = -log_p.gather(-1, (labels * kept)[..., None]).squeeze(-1)
    loss = ((1 - smoothing) * nll - smoothing * log_p.mean(-1)) * kept
    return (loss.sum(-1) / kept.sum(-1)).mean()


def classes_on_axis_1(logits, labels, smoothing, ignore_index=-100):
    log_p = F.log_softmax(logits, dim=1)
    kept = labels != ignore_index
    nll = -log_p.gather(-1, (labels * kept)[..., None]).squeeze(-1)
    return ((1 - smoothing) * nll - smoothing * log_p.mean(-1))[kept].mean()


def log_of_softmax(logits, labels, smoothing, ignore_index=-100):
    log_p = torch.log(F.softmax(logits, dim=-1))
    kept = labels != ignore_index
    nll = -log_p.gather(-1, (labels * kept)[..., None]).squeeze(-1)
    return ((1 - smoothing) * nll - smoothing * log_p.mean(-1))[kept].mean()


def padding_scored(logits, labels, smoothing, ignore_index=-100):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                           label_smoothing=smoothing)


@pytest.mark.parametrize("answer, mistake", [
    (mean_over_every_position, "averages over padded positions too"),
    (smoothing_paid_by_padding, "padded rows still pay the smoothing term"),
    (padding_scored, "ignore_index not used: padded positions are scored as if <pad> were the answer"),
    (fairseq_port, "smoothing spread over V - 1 classes (the label excluded)"),
    (label_left_out, "smoothing / V not given to the label's own class"),
    (annotated_transformer_port,
     "The Annotated Transformer's convention: smoothing / (V - 2), nothing on <pad>"),
    (kl_instead_of_cross_entropy, "KL divergence instead of cross-entropy: lower by the target's entropy"),
    (swapped, "1 - smoothing and smoothing swapped"),
    (smoothing_not_over_v, "smoothing not divided by V: every class gets all of it"),
    (sign_flipped, "sign error: the loss is -log p, not log p"),
    (summed, "sum instead of mean"),
    (per_sequence, "averaged per sequence, then over sequences"),
    (classes_on_axis_1, "log_softmax over axis 1, F.cross_entropy's (N, C, ...) class axis"),
    (log_of_softmax, "log of softmax in two steps: exp underflows, and log 0 = -inf"),
], ids=lambda value: value.__name__ if callable(value) else "")
def test_each_catalogued_mistake_is_named(answer, mistake):
    _named(answer, mistake)


def test_the_annotated_transformer_is_named_as_a_convention_not_an_error():
    result = _named(annotated_transformer_port,
                    "The Annotated Transformer's convention: smoothing / (V - 2), nothing on <pad>")
    assert "convention" in str(result)


# ---- other wrong answers -----------------------------------------------------------------------

def per_position_losses(logits, labels, smoothing, ignore_index=-100):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                           label_smoothing=smoothing, ignore_index=ignore_index, reduction="none")


def as_a_float(logits, labels, smoothing, ignore_index=-100):
    return wrapping_torch(logits, labels, smoothing, ignore_index).item()


def rebuilt_from_value(logits, labels, smoothing, ignore_index=-100):
    return torch.tensor(wrapping_torch(logits, labels, smoothing, ignore_index).item(),
                        dtype=logits.dtype)


def labels_edited_in_place(logits, labels, smoothing, ignore_index=-100):
    kept = labels != ignore_index
    labels[~kept] = 0
    log_p = logits.log_softmax(-1)
    nll = -log_p.gather(-1, labels[..., None]).squeeze(-1)
    return ((1 - smoothing) * nll - smoothing * log_p.mean(-1))[kept].mean()


def probabilities_not_logs(logits, labels, smoothing, ignore_index=-100):
    p, kept = logits.softmax(-1), labels != ignore_index
    nll = -p.gather(-1, (labels * kept)[..., None]).squeeze(-1)
    return ((1 - smoothing) * nll - smoothing * p.mean(-1))[kept].mean()


def smoothing_squared(logits, labels, smoothing, ignore_index=-100):
    return wrapping_torch(logits, labels, smoothing ** 2, ignore_index)


@pytest.mark.parametrize("answer, words", [
    (per_position_losses, ["shape"]),
    (as_a_float, ["tensor", "float"]),
    (rebuilt_from_value, ["gradient"]),
    (labels_edited_in_place, ["labels", "in place"]),
    (probabilities_not_logs, ["values differ"]),
    (smoothing_squared, ["values differ"]),
], ids=lambda value: value.__name__ if callable(value) else "")
def test_other_wrong_answers_fail_and_say_why(answer, words):
    result = _fails(answer, *words)
    assert result.mistake is None, str(result)


def test_a_stub_is_not_attempted():
    def stub(logits, labels, smoothing, ignore_index=-100):
        """contract"""
        ...  # your code here

    assert check(NAME, stub).status == "not attempted"


@pytest.mark.parametrize("answer", [summed, smoothing_squared, per_position_losses])
def test_diagnoses_are_short_and_print_no_tensor(answer):
    text = str(check(NAME, answer))
    assert "tensor(" not in text, text
    assert all(len(line) < 240 for line in text.splitlines()), text
    assert len(text.splitlines()) <= 8, text


def test_every_hint_is_one_line_and_every_mistake_differs_from_the_reference():
    exercise = REGISTRY[NAME]
    for mistake in exercise.mistakes:
        assert mistake.hint and "\n" not in mistake.hint
        for variant in mistake.variants:
            assert not check(NAME, variant), mistake.name
