"""The estimation methods, each listed once: what the estimators' ``method=`` takes.

``method="fedgrem"`` is the method with its defaults; ``method=FedGrEM(penalty="paper")`` the method
with options of its own. A method is a parameter object in scikit-learn's sense (``get_params``,
``set_params``; ``clone`` and ``GridSearchCV(model, {"method__penalty": [...]})`` reach it through the
estimator), validated once, before a fit. :data:`METHODS` is the one list: the estimators, the command
line, the studies and the docs' method table read it.

A method of one's own is a subclass of :class:`Method` (``docs/extending.md``), with its options'
:mod:`constraints` and the local updates of the methods here (:func:`em_update`, :func:`grem_update`,
:func:`step_sizes`) at hand: the estimators fit it without any registration. It runs under differential privacy
where its :meth:`Method.private` declares a :class:`PrivateForm` (``docs/extending.md``).
"""

from sklearn.base import clone

from . import _params as constraints
from .algorithms import (TGMM, DFedEM, DFedGrEM, DynamicGraph, FedEM, FedeRiCo, FedGrEM, GradientStrategy, LocalEM,
                         LocalGrEM, PooledEM, PooledGrEM, SparseFedGrEM)
from .algorithms import Strategy as Method
from .algorithms._base import PrivateForm, em_update, grem_update, shares_mean, step_sizes

__all__ = ["METHODS", "Method", "GradientStrategy", "PrivateForm", "constraints", "em_update", "grem_update",
           "shares_mean", "step_sizes",
           "make_method", "gather_options", "FedGrEM", "FedEM", "DFedEM", "DFedGrEM",
           "FedeRiCo", "DynamicGraph", "TGMM", "LocalEM", "LocalGrEM", "PooledEM", "PooledGrEM",
           "SparseFedGrEM"]

#: Every method fedmm ships, by the name ``method=`` takes.
METHODS = {cls.name: cls for cls in (FedGrEM, FedEM, DFedEM, DFedGrEM, FedeRiCo, DynamicGraph, TGMM, LocalEM,
                                     LocalGrEM, PooledEM, PooledGrEM, SparseFedGrEM)}


def make_method(method):
    """A validated method object of its own: the named method with its defaults, or a copy of ``method``
    (so that fitting never changes the object the user passed)."""
    if isinstance(method, str):
        if method not in METHODS:
            raise ValueError(f"Unknown method {method!r}; choose one of {list(METHODS)} or pass a method object "
                             "(fedmm.methods).")
        return METHODS[method]().validate()
    if isinstance(method, Method):
        return clone(method).validate()
    raise ValueError(f"method must be one of {list(METHODS)} or a method object (fedmm.methods); got {method!r}.")



def gather_options(options):
    """Fit options given as one flat dict, ``{"method": "fedgrem", "penalty": "paper", "n_init": 5}``, as the
    estimators take them: ``{"method": FedGrEM(penalty="paper"), "n_init": 5}``, the method's own options
    moved onto a copy of it (``"fedgrem"`` when ``options`` name none). For scripts and studies that
    describe fits by flat dicts."""
    options = dict(options)
    method = options.pop("method", "fedgrem")
    method = clone(method) if isinstance(method, Method) else METHODS[method]()
    own = method.get_params()
    method.set_params(**{name: options.pop(name) for name in list(options) if name in own})
    return {"method": method, **options}
