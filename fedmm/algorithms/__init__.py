"""Estimation strategies, selected by name through the estimators' ``method=``."""

from ._base import Algorithm, DivergenceError, FitResult, fit_restarts, run_rounds
from .local import LocalEM, LocalGrEM
from .pooled import PooledEM, PooledGrEM

METHODS = {
    "local-em": LocalEM,
    "local-grem": LocalGrEM,
    "pooled-em": PooledEM,
    "pooled-grem": PooledGrEM,
}

__all__ = ["METHODS", "Algorithm", "DivergenceError", "FitResult", "fit_restarts", "run_rounds",
           "make_algorithm"]


def make_algorithm(method, **options):
    """Instantiate the strategy registered as ``method``."""
    try:
        cls = METHODS[method]
    except KeyError:
        raise ValueError(f"Unknown method {method!r}; choose one of {sorted(METHODS)}.") from None
    return cls(**options)
