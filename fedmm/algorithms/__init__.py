"""Estimation strategies, selected by name through the estimators' ``method=``.

Each is a client step and a server step over :mod:`fedmm.protocol`'s messages;
:mod:`fedmm.engine` runs them.
"""

import inspect

from ._base import GradientStrategy, Strategy
from .dfedem import DFedEM
from .dfedgrem import DFedGrEM
from .dynamic import DynamicGraph
from .fedem import FedEM
from .federico import FedeRiCo
from .fedgrem import FedGrEM
from .local import LocalEM, LocalGrEM
from .pooled import PooledEM, PooledGrEM
from .tgmm import TGMM

METHODS = {
    "fedgrem": FedGrEM,
    "fedem": FedEM,
    "d-fedem": DFedEM,
    "d-fedgrem": DFedGrEM,
    "federico": FedeRiCo,
    "dynamic-graph": DynamicGraph,
    "tgmm": TGMM,
    "local-em": LocalEM,
    "local-grem": LocalGrEM,
    "pooled-em": PooledEM,
    "pooled-grem": PooledGrEM,
}

__all__ = ["METHODS", "Strategy", "GradientStrategy", "make_strategy", "method_options"]


def method_options(method):
    """The options (constructor arguments) the strategy registered as ``method`` takes."""
    try:
        cls = METHODS[method]
    except KeyError:
        raise ValueError(f"Unknown method {method!r}; choose one of {sorted(METHODS)}.") from None
    return tuple(inspect.signature(cls).parameters)


def make_strategy(method, **options):
    """Instantiate the strategy registered as ``method`` with ``options`` (all of which it must take)."""
    unknown = sorted(set(options) - set(method_options(method)))
    if unknown:
        raise ValueError(f"method={method!r} takes no option(s) {unknown}; it takes {list(method_options(method))}.")
    return METHODS[method](**options)
