"""Hot loops: posteriors with log-sum-exp and responsibility-weighted sums.

The backend is chosen here and only here. Each backend is a module with the
same functions as :mod:`fedmm.kernels._numpy`, the reference implementation
and the oracle of every fast path.
"""

from . import _numpy

_BACKENDS = {"numpy": _numpy}

__all__ = ["get_kernels"]


def get_kernels(backend="numpy"):
    """Return the kernel module of ``backend`` (``"numpy"``: the reference)."""
    try:
        return _BACKENDS[backend]
    except KeyError:
        raise ValueError(f"Unknown backend {backend!r}; choose one of {sorted(_BACKENDS)}.") from None
