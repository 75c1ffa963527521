"""The run cache of `make test` (tfmlib/_runcache.py): off unless TFMLIB_RUN_CACHE is set; when
set, a second identical call returns what the first returned, leaves the random state where the
run would have, and anything that could change the result makes a fresh run."""
import torch

from tfmlib._runcache import ENV_VAR, cached_run
from tfmlib.training import ModelConfig, train

CALLS = []


@cached_run
def quiet_run(scale: float) -> list:
    """A run that draws no random number: its result holds whatever the random state."""
    CALLS.append(scale)
    return [scale * torch.ones(2)]


@cached_run
def noisy_run(config: ModelConfig, scale: float, data: torch.Tensor | None = None) -> dict:
    """A stand-in for a training run: it draws from the global random state, as dropout does."""
    CALLS.append(scale)
    return {"weights": [torch.randn(3, requires_grad=True)], "loss": [scale * torch.rand(()).item()]}


def test_without_the_variable_nothing_is_kept(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    CALLS.clear()
    noisy_run(ModelConfig(), 1.0)
    noisy_run(ModelConfig(), 1.0)
    assert CALLS == [1.0, 1.0]


def test_a_second_identical_call_loads_the_first_and_leaves_the_random_state_as_a_run_would(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    CALLS.clear()
    torch.manual_seed(5)
    first = noisy_run(ModelConfig(), 2.0)
    after_first = torch.rand(4)
    torch.manual_seed(5)
    second = noisy_run(ModelConfig(), 2.0)
    assert CALLS == [2.0]                                   # the second call did not run
    assert torch.equal(second["weights"][0], first["weights"][0]) and second["loss"] == first["loss"]
    assert second["weights"][0].requires_grad
    assert torch.equal(torch.rand(4), after_first)          # the same draws follow


def test_what_could_change_the_result_makes_a_fresh_run(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    CALLS.clear()
    before = torch.get_num_threads()
    try:
        for change in range(6):
            torch.manual_seed(7 if change != 1 else 8)                     # 1: another random state
            config = ModelConfig(d_model=16 if change == 2 else 32)        # 2: another config
            data = torch.arange(4) + (change == 3)                         # 3: other tensor contents
            torch.set_num_threads(2 if change == 4 else 1)                 # 4: another thread count
            noisy_run(config, 3.0 if change != 5 else 4.0, data=data)      # 5: another argument
    finally:
        torch.set_num_threads(before)
    assert len(CALLS) == 6


def test_a_config_field_that_its_repr_leaves_out_makes_a_fresh_run(tmp_path, monkeypatch):
    """ModelConfig's repr hides `positional` and `scale_scores`: the lab's "no positions" must
    not load the baseline's run."""
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    CALLS.clear()
    for config in (ModelConfig(), ModelConfig(positional=False), ModelConfig(scale_scores=False)):
        torch.manual_seed(7)
        noisy_run(config, 3.0)
    assert len(CALLS) == 3


def test_a_cached_training_equals_a_fresh_one(tmp_path, monkeypatch):
    options = dict(task="reverse", steps=4, batch_size=8, min_len=2, max_len=4, eval_every=2, eval_size=8, seed=3)
    monkeypatch.delenv(ENV_VAR, raising=False)
    fresh_params, fresh_history = train(ModelConfig(), **options)
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    train(ModelConfig(), **options)
    params, history = train(ModelConfig(), **options)
    assert len(list(tmp_path.iterdir())) == 1
    assert history == fresh_history
    assert torch.equal(params["embedding"], fresh_params["embedding"]) and params["embedding"].requires_grad


def test_a_run_that_draws_no_random_number_is_reused_from_any_random_state(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    CALLS.clear()
    torch.manual_seed(1)
    quiet_run(5.0)
    torch.manual_seed(2)
    state = torch.get_rng_state()
    assert torch.equal(quiet_run(5.0)[0], 5.0 * torch.ones(2)) and CALLS == [5.0]
    assert torch.equal(torch.get_rng_state(), state)        # and left untouched
