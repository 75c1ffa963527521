"""Notebook 09's training recipe against PyTorch: adamw_step vs torch.optim.AdamW,
clip_grad_norm vs torch.nn.utils.clip_grad_norm_, and the two learning-rate schedules
driving a real optimizer through torch.optim.lr_scheduler."""
import math

import pytest
import torch

from tfmlib import (adam_init, adam_step, adamw_step, clip_grad_norm, warmup_cosine_lr,
                    warmup_inverse_sqrt_lr, zero_grad)

SHAPES = [(3,), (2, 5), (), (4, 1, 3), (7,), (1,)]


def _random_parameters(generator, dtype=torch.float64, shapes=SHAPES):
    return [torch.randn(shape, generator=generator, dtype=dtype).requires_grad_() for shape in shapes]


def _clones(params):
    return [p.detach().clone().requires_grad_() for p in params]


# ---- AdamW ------------------------------------------------------------------------------------

@pytest.mark.parametrize("lr, betas, eps, weight_decay", [(1e-2, (0.9, 0.999), 1e-8, 1e-2),
                                                          (0.2, (0.8, 0.98), 1e-9, 0.5),
                                                          (3e-2, (0.0, 0.9), 1e-6, 0.0),
                                                          (5e-3, (0.95, 0.9999), 1e-8, 3.0)])
def test_adamw_matches_torch_optim_adamw_over_many_steps(lr, betas, eps, weight_decay):
    """Random parameters of awkward shapes; two of them never get a gradient."""
    generator = torch.Generator().manual_seed(11)
    ours = _random_parameters(generator)
    theirs = _clones(ours)
    never = {1, 4}  # these take no part in the loss: their .grad stays None
    targets = [torch.randn(p.shape, generator=generator, dtype=torch.float64) for p in ours]

    def loss(params):
        return sum(((p - t) ** 2 * (1 + i)).sum() for i, (p, t) in enumerate(zip(params, targets))
                   if i not in never)

    optimizer = torch.optim.AdamW(theirs, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    state = adam_init(ours)
    start = [p.detach().clone() for p in ours]
    for _ in range(40):
        optimizer.zero_grad()
        loss(theirs).backward()
        optimizer.step()
        zero_grad(ours)
        loss(ours).backward()
        adamw_step(ours, state, lr, betas, eps, weight_decay)
    assert state["t"] == 40
    for i, (a, b) in enumerate(zip(ours, theirs)):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-10, atol=1e-12, msg=f"parameter {i}")
        if i in never:
            assert a.grad is None and torch.equal(a.detach(), start[i])  # not even decayed
        else:
            assert not torch.equal(a.detach(), start[i])


def test_adamw_in_float32_on_a_model_matches_torch(device):
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).to(device)
    copy = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).to(device)
    copy.load_state_dict(model.state_dict())
    x, y = torch.randn(9, 5, device=device), torch.randn(9, 3, device=device)
    optimizer = torch.optim.AdamW(copy.parameters(), lr=0.01, weight_decay=0.1)
    params = list(model.parameters())
    state = adam_init(params)
    for _ in range(25):
        optimizer.zero_grad()
        ((copy(x) - y) ** 2).mean().backward()
        optimizer.step()
        zero_grad(params)
        ((model(x) - y) ** 2).mean().backward()
        adamw_step(params, state, lr=0.01, weight_decay=0.1)
    for a, b in zip(model.parameters(), copy.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_adamw_with_zero_decay_is_adam_and_decay_differs_from_adam_plus_l2():
    generator = torch.Generator().manual_seed(5)
    base = _random_parameters(generator, shapes=[(4,), (2, 3)])
    grads = [[torch.randn(p.shape, generator=generator, dtype=torch.float64) * 10 ** i
              for i, p in enumerate(base)] for _ in range(6)]
    runs = {name: _clones(base) for name in ("adam", "adamw0", "adamw", "l2")}
    l2 = torch.optim.Adam(runs["l2"], lr=0.05, weight_decay=0.3)  # decay added to the gradient
    states = {name: adam_init(runs[name]) for name in ("adam", "adamw0", "adamw")}
    for step_grads in grads:
        for params in runs.values():
            for p, g in zip(params, step_grads):
                p.grad = g.clone()
        adam_step(runs["adam"], states["adam"], lr=0.05)
        adamw_step(runs["adamw0"], states["adamw0"], lr=0.05, weight_decay=0.0)
        adamw_step(runs["adamw"], states["adamw"], lr=0.05, weight_decay=0.3)
        l2.step()
    for a, b in zip(runs["adam"], runs["adamw0"]):
        assert torch.equal(a, b)
    assert max((a - b).abs().max().item() for a, b in zip(runs["adamw"], runs["l2"])) > 1e-3


def test_adamw_skips_a_parameter_without_gradient_on_one_step():
    a = torch.randn(3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, dtype=torch.float64, requires_grad=True)
    state = adam_init([a, b])
    (a.sum() * b.sum()).backward()
    adamw_step([a, b], state, lr=0.1, weight_decay=0.5)
    b_after = b.detach().clone()
    zero_grad([a, b])
    a.square().sum().backward()  # b has no gradient this step: no decay, no update
    adamw_step([a, b], state, lr=0.1, weight_decay=0.5)
    assert torch.equal(b.detach(), b_after) and state["t"] == 2


def test_adamw_first_step_is_decay_then_lr_times_g_over_abs_g():
    p = torch.tensor([1.0, -2.0, 4.0], dtype=torch.float64, requires_grad=True)
    p.grad = torch.tensor([0.5, 3.0, -1e-3], dtype=torch.float64)
    adamw_step([p], adam_init([p]), lr=0.1, weight_decay=0.2)
    expected = torch.tensor([1.0, -2.0, 4.0], dtype=torch.float64) * (1 - 0.1 * 0.2) \
        - 0.1 * p.grad / (p.grad.abs() + 1e-8)  # step 1: m_hat = g, sqrt(v_hat) = |g|
    torch.testing.assert_close(p.detach(), expected, rtol=1e-14, atol=1e-14)
    assert p.is_leaf and p.requires_grad


@pytest.mark.parametrize("bad, message", [({"weight_decay": -0.1}, "weight_decay"),
                                          ({"weight_decay": float("nan")}, "weight_decay"),
                                          ({"lr": -1.0}, "lr"), ({"betas": (0.9, 1.0)}, "betas")])
def test_adamw_bad_arguments_are_named(bad, message):
    p = torch.zeros(2, requires_grad=True)
    p.grad = torch.ones(2)
    arguments = {"lr": 0.1, **bad}
    with pytest.raises((ValueError, TypeError), match=message):
        adamw_step([p], adam_init([p]), **arguments)


# ---- clip_grad_norm ---------------------------------------------------------------------------

def _with_gradients(generator, scale, missing=(), dtype=torch.float64, shapes=SHAPES):
    params = _random_parameters(generator, dtype, shapes)
    for i, p in enumerate(params):
        if i not in missing:
            p.grad = scale * torch.randn(p.shape, generator=generator, dtype=dtype)
    return params


@pytest.mark.parametrize("scale, max_norm", [(10.0, 1.0), (0.01, 1.0), (3.0, 0.5), (1e-3, 0.0),
                                             (100.0, 250.0), (1.0, 2.0)])
@pytest.mark.parametrize("missing", [(), (0, 3)])
def test_clip_grad_norm_matches_torch(scale, max_norm, missing):
    generator = torch.Generator().manual_seed(int(scale * 1000) + len(missing))
    ours = _with_gradients(generator, scale, missing)
    theirs = _clones(ours)
    for a, b in zip(ours, theirs):
        b.grad = None if a.grad is None else a.grad.clone()
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type=2.0)
    grads_before = [p.grad for p in ours]
    total = clip_grad_norm(ours, max_norm)
    assert total.dim() == 0 and total.dtype == expected.dtype
    torch.testing.assert_close(total, expected, rtol=1e-12, atol=0)
    for a, b, before in zip(ours, theirs, grads_before):
        if b.grad is None:
            assert a.grad is None
        else:
            assert a.grad is before  # scaled in place, the same tensor
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-15)


def test_clip_grad_norm_keeps_the_direction_and_caps_the_global_norm():
    generator = torch.Generator().manual_seed(2)
    params = _with_gradients(generator, 50.0)
    flat_before = torch.cat([p.grad.reshape(-1) for p in params])
    total = clip_grad_norm(params, 1.0)
    flat_after = torch.cat([p.grad.reshape(-1) for p in params])
    torch.testing.assert_close(total, flat_before.norm())
    assert flat_after.norm().item() == pytest.approx(1.0, rel=1e-5)
    torch.testing.assert_close(flat_after / flat_after.norm(), flat_before / flat_before.norm())


def test_clip_grad_norm_below_the_limit_leaves_gradients_alone():
    generator = torch.Generator().manual_seed(4)
    params = _with_gradients(generator, 0.1)
    before = [p.grad.clone() for p in params]
    total = clip_grad_norm(params, 100.0)
    assert total.item() < 100.0
    assert all(torch.equal(p.grad, b) for p, b in zip(params, before))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_clip_grad_norm_on_one_tensor_and_without_gradients_like_torch(dtype, device):
    p = torch.randn(6, 5, dtype=dtype, device=device, requires_grad=True)
    q = p.detach().clone().requires_grad_()
    p.grad = 7 * torch.ones(6, 5, dtype=dtype, device=device)
    q.grad = p.grad.clone()
    torch.testing.assert_close(clip_grad_norm(p, 3.0), torch.nn.utils.clip_grad_norm_(q, 3.0))
    torch.testing.assert_close(p.grad, q.grad)
    none = [torch.zeros(3, requires_grad=True)]
    torch.testing.assert_close(clip_grad_norm(none, 1.0),
                               torch.nn.utils.clip_grad_norm_([torch.zeros(3, requires_grad=True)], 1.0))
    assert clip_grad_norm([], 1.0).item() == 0.0


@pytest.mark.parametrize("parameters, max_norm, message", [([torch.zeros(2)], -1.0, "max_norm"),
                                                           ([torch.zeros(2)], float("inf"), "max_norm"),
                                                           ([torch.zeros(2), 3.0], 1.0, r"parameters\[1\]")])
def test_clip_grad_norm_bad_arguments_are_named(parameters, max_norm, message):
    with pytest.raises((ValueError, TypeError), match=message):
        clip_grad_norm(parameters, max_norm)


# ---- schedules driving a real optimizer -------------------------------------------------------

def _lrs_of(scheduler_factory, steps):
    """The learning rate the optimizer uses at each of its steps 0 .. steps - 1."""
    weight = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scheduler = scheduler_factory(optimizer)
    lrs = []
    for _ in range(steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        weight.grad = torch.ones(1)
        optimizer.step()
        scheduler.step()
    return lrs


@pytest.mark.parametrize("d_model, warmup, factor", [(512, 4000, 1.0), (16, 7, 2.0), (33, 1, 0.5)])
def test_warmup_inverse_sqrt_equals_lambda_lr_with_the_papers_formula(d_model, warmup, factor):
    def paper(k):  # the formula of "Attention is all you need", written out independently
        return 0.0 if k == 0 else factor * d_model ** -0.5 * min(k ** -0.5, k * warmup ** -1.5)

    steps = 3 * warmup + 50
    expected = _lrs_of(lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, paper), steps)
    ours = _lrs_of(lambda opt: torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: warmup_inverse_sqrt_lr(k, d_model, warmup, factor)), steps)
    assert ours == pytest.approx(expected, rel=1e-12, abs=0)
    assert ours[0] == 0.0
    peak = max(range(steps), key=ours.__getitem__)
    assert peak == warmup  # rises to the warm-up step, falls after it
    assert ours[peak] == pytest.approx(factor * (d_model * warmup) ** -0.5, rel=1e-12)


def test_warmup_inverse_sqrt_with_torch_adam_equals_adam_step_on_the_schedule():
    """The paper's settings: Adam(betas=(0.9, 0.98), eps=1e-9) under LambdaLR, against adam_step."""
    generator = torch.Generator().manual_seed(8)
    ours = _random_parameters(generator, shapes=[(3, 4), (5,)])
    theirs = _clones(ours)
    optimizer = torch.optim.Adam(theirs, lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda k: 64 ** -0.5 * min((k + 1) ** -0.5, (k + 1) * 10 ** -1.5))
    state = adam_init(ours)
    for step in range(1, 41):  # steps counted from 1
        grads = [torch.randn(p.shape, generator=generator, dtype=torch.float64) for p in ours]
        for a, b, g in zip(ours, theirs, grads):
            a.grad, b.grad = g.clone(), g.clone()
        optimizer.step()
        scheduler.step()
        adam_step(ours, state, lr=warmup_inverse_sqrt_lr(step, 64, 10), betas=(0.9, 0.98), eps=1e-9)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("peak, warmup, total, final", [(3e-3, 40, 400, 0.1), (1.0, 1, 20, 0.1),
                                                        (0.5, 7, 61, 0.0), (2e-4, 13, 100, 0.25),
                                                        (1e-2, 30, 30, 0.1)])
def test_warmup_cosine_equals_torch_linear_then_cosine_annealing(peak, warmup, total, final):
    """torch's LinearLR (from peak / warmup at step 1 up to peak at step warmup), then
    CosineAnnealingLR (peak at step warmup down to final * peak at step total)."""
    def torch_schedule(optimizer):
        for group in optimizer.param_groups:
            group["lr"] = peak
        warm = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1 / warmup, end_factor=1.0,
                                                 total_iters=max(1, warmup - 1))
        decay = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, total - warmup),
                                                           eta_min=final * peak)
        return torch.optim.lr_scheduler.SequentialLR(optimizer, [warm, decay], milestones=[warmup - 1]) \
            if warmup > 1 else decay

    expected = _lrs_of(torch_schedule, total)  # optimizer step k is our step k + 1
    ours = [warmup_cosine_lr(step, peak, warmup, total, final) for step in range(1, total + 1)]
    assert ours == pytest.approx(expected, rel=1e-9, abs=1e-15)
    assert ours[warmup - 1] == pytest.approx(peak, rel=1e-15)  # the peak ends the warm-up
    if total > warmup:
        assert ours[-1] == pytest.approx(final * peak, rel=1e-12)
    assert warmup_cosine_lr(0, peak, warmup, total, final) == 0.0
    assert warmup_cosine_lr(total + 5, peak, warmup, total, final) == pytest.approx(final * peak)


def test_warmup_cosine_is_what_train_uses():
    """train's schedule: warm-up over the first tenth of the steps, decay to a tenth of lr."""
    from tfmlib import training
    lrs = []

    def recording_step(weights, state, lr, *args, **kwargs):
        lrs.append(lr)
        return adam_step(weights, state, lr, *args, **kwargs)

    original = training.adam_step
    training.adam_step = recording_step
    try:
        training.train(steps=12, eval_every=12, batch_size=4, eval_size=4, lr=5e-3)
    finally:
        training.adam_step = original
    assert lrs == [warmup_cosine_lr(step, 5e-3, 1, 12) for step in range(1, 13)]
    assert lrs[0] == 5e-3 and lrs[-1] == pytest.approx(5e-4)


@pytest.mark.parametrize("call, message", [
    (lambda: warmup_inverse_sqrt_lr(-1, 512, 4000), "step"),
    (lambda: warmup_inverse_sqrt_lr(1.5, 512, 4000), "step"),
    (lambda: warmup_inverse_sqrt_lr(3, 0, 4000), "d_model"),
    (lambda: warmup_inverse_sqrt_lr(3, 512, 0), "warmup_steps"),
    (lambda: warmup_cosine_lr(3, 0.1, 50, 10), "warmup_steps"),
    (lambda: warmup_cosine_lr(3, -0.1, 5, 10), "peak_lr"),
    (lambda: warmup_cosine_lr(3, 0.1, 5, 10, final_fraction=1.5), "final_fraction"),
])
def test_schedules_name_a_bad_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_papers_peak_for_d_model_512():
    assert warmup_inverse_sqrt_lr(4000, 512, 4000) == pytest.approx(1 / math.sqrt(512 * 4000))
    assert warmup_inverse_sqrt_lr(4000, 512, 4000) > warmup_inverse_sqrt_lr(3999, 512, 4000)
    assert warmup_inverse_sqrt_lr(4000, 512, 4000) > warmup_inverse_sqrt_lr(4001, 512, 4000)


def test_plot_schedules_draws_both_schedules_with_their_peaks():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from tfmlib.viz import adam as adam_viz
    fig = adam_viz.plot_schedules(d_model=64, warmup_steps=100, paper_steps=1000, peak_lr=1e-2, train_steps=50)
    paper, cosine = fig.axes
    x, y = paper.lines[0].get_data()
    assert x[y.argmax()] == 100 and y.max() == pytest.approx(warmup_inverse_sqrt_lr(100, 64, 100))
    x, y = cosine.lines[0].get_data()
    assert x[y.argmax()] == 5 and y.max() == pytest.approx(1e-2) and y[-1] == pytest.approx(1e-3)
    assert all(ax.get_xlabel() == "step" for ax in fig.axes) and paper.get_ylabel() == "learning rate"
    plt.close(fig)
