"""Estimation strategies, selected by name through the estimators' ``method=``."""

import inspect

from ._base import Algorithm, DivergenceError, FitResult, fit_restarts, run_rounds
from .fedem import FedEM
from .fedgrem import FedGrEM
from .local import LocalEM, LocalGrEM
from .pooled import PooledEM, PooledGrEM
from .tgmm import TGMM

METHODS = {
    "fedgrem": FedGrEM,
    "fedem": FedEM,
    "tgmm": TGMM,
    "local-em": LocalEM,
    "local-grem": LocalGrEM,
    "pooled-em": PooledEM,
    "pooled-grem": PooledGrEM,
}

__all__ = ["METHODS", "Algorithm", "DivergenceError", "FitResult", "fit_restarts", "run_rounds",
           "make_algorithm"]


def make_algorithm(method, **options):
    """Instantiate the strategy registered as ``method`` with the options it takes.

    The estimators hold every method's options; each strategy receives only
    those in its own signature.
    """
    try:
        cls = METHODS[method]
    except KeyError:
        raise ValueError(f"Unknown method {method!r}; choose one of {sorted(METHODS)}.") from None
    accepted = inspect.signature(cls).parameters
    return cls(**{k: v for k, v in options.items() if k in accepted})
