"""The one registry of models: every estimator class by its model's name.

An estimator class that names its ``model`` (``"gmm"``, ``"mor"``, or a name of its own in a file outside
fedmm) is registered when it is defined: no call, no edit to fedmm. Flower's clients build the estimator
the server names from it, and Flower's app, the command line and the studies list its names. A model whose
estimator declares a :class:`Simulation` runs in the studies (:mod:`fedmm.studies`, ``fedmm simulate``).
"""

from typing import Callable, NamedTuple

__all__ = ["MODELS", "Simulation", "register_model", "get_model", "simulated_models"]


class Simulation(NamedTuple):
    """How the studies simulate a model's federations (an estimator's class attribute ``simulation``).

    Attributes
    ----------
    make : callable
        ``make(n_clients, n_samples, *, h, outlier_clients, random_state, ...) -> (*data, truth)``: the clients'
        data (``X``, and ``y`` for a model of responses) and a :class:`fedmm.simulate.FederatedTruth`
        (:func:`fedmm.simulate.make_federated_gmm`).
    sample : callable
        ``sample(truth, n, random_state) -> (*data, labels)``: held-out rows of every client, with their components.
    options : dict
        The estimator's arguments that fit the model simulated (the paper's: unit variances, unit noise).
    """

    make: Callable
    sample: Callable
    options: dict

#: Every model by name: ``{"gmm": FederatedGaussianMixture, "mor": FederatedMixtureRegression, ...}``.
MODELS = {}


def register_model(cls):
    """Enter the estimator class ``cls`` under its ``model`` name (:meth:`_FederatedMixture.__init_subclass__`).
    A name is one model's: another class may not take it (the same class defined again replaces itself)."""
    held = MODELS.get(cls.model)
    if held is not None and (held.__module__, held.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(f"model={cls.model!r} is {held.__module__}.{held.__qualname__}'s; give "
                         f"{cls.__qualname__} a name of its own.")
    MODELS[cls.model] = cls
    return cls


def get_model(name):
    """The estimator class of the model called ``name``, or a ``ValueError`` naming the models there are."""
    if name not in MODELS:
        raise ValueError(f"Unknown model {name!r}; the models are {sorted(MODELS)} (a model of your own is "
                         "registered when its estimator class, with its model name, is defined: import its module).")
    return MODELS[name]


def simulated_models():
    """The names of the models whose estimators declare a :class:`Simulation`: those the studies run."""
    return [name for name, cls in MODELS.items() if getattr(cls, "simulation", None) is not None]
