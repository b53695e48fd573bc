"""Hot loops: posteriors with log-sum-exp and responsibility-weighted sums.

Kernels are grouped by family, backends as implementations: :mod:`fedmm.kernels.gaussian` and
:mod:`fedmm.kernels.regression` each hold the family's numpy reference (the oracle of every fast path), Numba
and array-module implementations. The backend is chosen here and only here; each backend's module gathers the
families' implementations under one set of names (``gaussian_estep``, ``regression_log_resp``, ...):

- ``"numpy"``: the reference, per-client blocks of dense linear algebra (:mod:`fedmm.kernels._numpy`);
- ``"numba"``: one fused pass per round (:mod:`fedmm.kernels._numba`), parallel
  where the work pays for the threads (:mod:`fedmm.threads`), compiled on first
  use and cached on disk;
- ``"cupy"``: the array-module code on a GPU (:mod:`fedmm.kernels._array_module`);
- ``"auto"``: CuPy when it is installed, a GPU is present and the problem has
  at least ``GPU_MIN_SAMPLES`` samples; Numba otherwise.

Fast backends are built only when asked for, so importing fedmm compiles no
kernel and loads no CuPy.

Kernels belong to families: fedmm's Gaussian and regression families call the
``gaussian_*`` and ``regression_*`` functions of their backend through
:attr:`fedmm.families.Family.kernels`. A family of one's own computes its
E-step as it likes (numpy suffices: ``tests/poisson_mixture.py``); for backends
of its own it overrides ``kernels`` and picks by :attr:`~fedmm.families.Family.backend`.
"""

import importlib

from . import _numpy

BACKENDS = ("auto", "numpy", "numba", "cupy")
GPU_MIN_SAMPLES = 10 ** 6

__all__ = ["BACKENDS", "GPU_MIN_SAMPLES", "get_kernels", "resolve_backend", "gpu_available"]

_cache = {"numpy": _numpy}


def gpu_available():
    """Whether CuPy is importable and sees at least one GPU."""
    try:
        cupy = importlib.import_module("cupy")
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # not installed, no driver, no device: no GPU path
        return False


def resolve_backend(backend, n_samples):
    """The concrete backend ``"auto"`` means for a problem of ``n_samples`` samples."""
    if backend not in BACKENDS:
        raise ValueError(f"Unknown backend {backend!r}; choose one of {BACKENDS}.")
    if backend != "auto":
        return backend
    return "cupy" if n_samples >= GPU_MIN_SAMPLES and gpu_available() else "numba"


def get_kernels(backend="numpy"):
    """Return the kernel functions of a concrete ``backend`` ("numpy", "numba" or "cupy")."""
    if backend in _cache:
        return _cache[backend]
    if backend == "numba":
        _cache[backend] = importlib.import_module("fedmm.kernels._numba")
    elif backend == "cupy":
        if not gpu_available():
            raise ValueError("backend='cupy' needs CuPy and a GPU (pip install 'fedmm[gpu]'); "
                             "use backend='numba' or 'auto'.")
        from ._array_module import kernels
        _cache[backend] = kernels(importlib.import_module("cupy"))
    else:
        raise ValueError(f"Unknown backend {backend!r}; choose one of {BACKENDS}.")
    return _cache[backend]
