"""Notebook 09: the hand-written Adam against torch.optim.Adam, step for step."""
import copy

import pytest
import torch
from torch import nn

from tfmlib import adam_init, adam_step, sgd_step, zero_grad


class SmallNet(nn.Module):
    """Two layers, plus a parameter the forward pass never uses (its grad stays None)."""

    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(3, 5, dtype=torch.float64)
        self.out = nn.Linear(5, 2, dtype=torch.float64)
        self.unused = nn.Parameter(torch.randn(4, dtype=torch.float64))

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(x)))


@pytest.mark.parametrize("lr, betas, eps", [(1e-2, (0.9, 0.999), 1e-8),
                                            (3e-2, (0.5, 0.9), 1e-6),
                                            (5e-3, (0.0, 0.99), 1e-8)])
def test_matches_torch_optim_adam_over_many_steps(lr, betas, eps):
    torch.manual_seed(0)
    reference = SmallNet()
    ours = copy.deepcopy(reference)
    unused_before = ours.unused.detach().clone()
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(17, 3, generator=generator, dtype=torch.float64)
    y = torch.randn(17, 2, generator=generator, dtype=torch.float64)

    optimizer = torch.optim.Adam(reference.parameters(), lr=lr, betas=betas, eps=eps)
    params = list(ours.parameters())
    state = adam_init(params)
    losses = []
    for _ in range(60):
        optimizer.zero_grad()
        ((reference(x) - y) ** 2).mean().backward()
        optimizer.step()

        zero_grad(params)
        loss = ((ours(x) - y) ** 2).mean()
        loss.backward()
        adam_step(params, state, lr=lr, betas=betas, eps=eps)
        losses.append(loss.item())

    assert state["t"] == 60
    assert losses[-1] < losses[0]  # it did train
    for (name, expected), got in zip(reference.named_parameters(), ours.parameters()):
        assert (got - expected).abs().max().item() < 1e-10, name  # observed <= 3e-13
    assert ours.unused.grad is None
    assert torch.equal(ours.unused.detach(), unused_before)
    index = [name for name, _ in ours.named_parameters()].index("unused")
    assert torch.all(state["m"][index] == 0) and torch.all(state["v"][index] == 0)


def test_adam_init_state_is_t0_and_separate_zero_moments():
    params = [torch.randn(3, 2, dtype=torch.float64, requires_grad=True),
              torch.randn(5, requires_grad=True)]
    state = adam_init(params)
    assert state["t"] == 0
    for p, m, v in zip(params, state["m"], state["v"]):
        assert m is not v and m.data_ptr() != v.data_ptr()
        assert m.data_ptr() != p.data_ptr()
        assert m.shape == p.shape and m.dtype == p.dtype and m.device == p.device
        assert torch.all(m == 0) and torch.all(v == 0)
        assert not m.requires_grad and not v.requires_grad
    state["m"][0].add_(1.0)
    assert torch.all(state["v"][0] == 0)  # writing m leaves v alone


def test_first_step_is_lr_times_sign_of_gradient():
    """With bias correction, step 1 moves each entry by lr * g / (|g| + eps)."""
    p = torch.tensor([1.0, -2.0, 3.0, 0.5], dtype=torch.float64, requires_grad=True)
    grad = torch.tensor([0.3, -4.0, 1e-3, -2.5], dtype=torch.float64)
    p.grad = grad.clone()
    state = adam_init([p])
    start = p.detach().clone()
    adam_step([p], state, lr=0.1, eps=1e-8)
    torch.testing.assert_close(p.detach(), start - 0.1 * grad / (grad.abs() + 1e-8),
                               rtol=1e-14, atol=1e-14)


def test_updates_in_place_and_parameters_stay_leaves():
    params = [torch.randn(4, 3, dtype=torch.float64, requires_grad=True),
              torch.randn(3, dtype=torch.float64, requires_grad=True)]
    ids, pointers = [id(p) for p in params], [p.data_ptr() for p in params]
    state = adam_init(params)
    moments = [id(m) for m in state["m"]] + [id(v) for v in state["v"]]
    for _ in range(3):
        zero_grad(params)
        (params[0].sum(0) * params[1]).square().sum().backward()
        adam_step(params, state, lr=0.01)
    assert [id(p) for p in params] == ids and [p.data_ptr() for p in params] == pointers
    assert all(p.is_leaf and p.requires_grad and p.grad_fn is None for p in params)
    assert [id(m) for m in state["m"]] + [id(v) for v in state["v"]] == moments  # state kept
    assert state["t"] == 3  # one count per call, not per parameter


def test_parameter_without_grad_in_one_step_is_left_alone():
    a = torch.randn(3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, dtype=torch.float64, requires_grad=True)
    state = adam_init([a, b])
    (a * b).sum().backward()
    adam_step([a, b], state, lr=0.1)
    b_after, m_b, v_b = b.detach().clone(), state["m"][1].clone(), state["v"][1].clone()
    zero_grad([a, b])
    a.square().sum().backward()       # b gets no grad this time
    adam_step([a, b], state, lr=0.1)
    assert b.grad is None
    assert torch.equal(b.detach(), b_after)
    assert torch.equal(state["m"][1], m_b) and torch.equal(state["v"][1], v_b)


def test_sgd_step_and_zero_grad():
    p = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    q = torch.tensor([3.0], dtype=torch.float64, requires_grad=True)
    p.grad = torch.tensor([0.5, -1.0], dtype=torch.float64)
    sgd_step([p, q], lr=0.1)
    assert p.detach().tolist() == pytest.approx([0.95, 2.1])
    assert q.detach().tolist() == [3.0]
    zero_grad([p, q])
    assert p.grad is None and q.grad is None


def test_adam_on_device(device):
    p = torch.randn(5, device=device, requires_grad=True)
    state = adam_init([p])
    assert state["m"][0].device.type == device.type
    p.square().sum().backward()
    before = p.detach().clone()
    adam_step([p], state, lr=0.1)
    assert p.device.type == device.type
    torch.testing.assert_close(p.detach(), before - 0.1 * torch.sign(before), rtol=1e-5, atol=1e-6)
