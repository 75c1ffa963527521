"""Finished training runs kept on disk, for the test suite only.

`make test` executes the notebooks that train more than once on the same machine (in the browser
test, then under nbval). A run with the same code, arguments, random state, CPU kernels and thread
count gives the same numbers bit for bit, so the second execution can load the first one's result
instead of training again. The cache is off unless the environment variable TFMLIB_RUN_CACHE names
a folder (the Makefile's test environment does): a learner's notebook always trains.

The key covers everything the result depends on: the function, its arguments (tensors by their
bytes), the source of every tfmlib module, the torch version, the CPU kernels (capability,
MKL_CBWR) and the thread count. The global random state is kept beside the result: a run that drew
from it is reused only from the same state, which is then moved on as the run moved it; a run
that drew nothing is reused from any (a fresh process starts from a random one).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from pathlib import Path

import torch

ENV_VAR = "TFMLIB_RUN_CACHE"


@functools.cache
def _library_source() -> str:
    """A digest of every tfmlib module's source: changed code, fresh runs."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        digest.update(path.relative_to(Path(__file__).parent).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _fingerprint(value) -> str:
    """A text that changes whenever `value` does: tensors by dtype, shape and bytes."""
    if isinstance(value, torch.Tensor):
        data = value.detach().cpu().contiguous()
        return f"tensor({data.dtype}, {tuple(data.shape)}, {hashlib.sha256(data.numpy().tobytes()).hexdigest()})"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__}({', '.join(_fingerprint(v) for v in value)})"
    if isinstance(value, dict):
        return f"dict({', '.join(f'{k!r}: {_fingerprint(v)}' for k, v in sorted(value.items()))})"
    if dataclasses.is_dataclass(value):  # every field, also those its repr leaves out
        return f"{type(value).__qualname__}({', '.join(f'{f.name}={_fingerprint(getattr(value, f.name))}' for f in dataclasses.fields(value))})"
    if isinstance(value, (str, int, float, bool, type(None))):
        return repr(value)
    raise TypeError(f"run cache: cannot fingerprint an argument of type {type(value).__name__}")


def _key(function, args: tuple, kwargs: dict) -> str:
    parts = [f"{function.__module__}.{function.__qualname__}", _fingerprint(args), _fingerprint(kwargs),
             _library_source(), torch.__version__, torch.backends.cpu.get_cpu_capability(),
             os.environ.get("MKL_CBWR", ""), str(torch.get_num_threads())]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def cached_run(function):
    """Decorate a training function: with TFMLIB_RUN_CACHE set, a call that was made before
    with the same key returns the stored result (see the module's docstring)."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        folder = os.environ.get(ENV_VAR)
        if not folder:
            return function(*args, **kwargs)
        path = Path(folder) / f"{function.__name__}-{_key(function, args, kwargs)}.pt"
        rng_before = torch.get_rng_state()
        if path.exists():
            result, stored_before, stored_after = torch.load(path, weights_only=True)
            if torch.equal(stored_before, stored_after):        # the run drew no random number
                return result
            if torch.equal(stored_before, rng_before):
                torch.set_rng_state(stored_after)
                return result
        result = function(*args, **kwargs)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")  # another process may write it too
        torch.save((result, rng_before, torch.get_rng_state()), partial)
        os.replace(partial, path)
        return result
    return wrapper
