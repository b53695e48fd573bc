"""The one registry of models: every estimator class by its model's name.

An estimator class that names its ``model`` (``"gmm"``, ``"mor"``, or a name of its own in a file outside
fedmm) is registered when it is defined: no call, no edit to fedmm. Flower's clients build the estimator
the server names from it, and Flower's app, the command line and the studies list its names.
"""

__all__ = ["MODELS", "register_model", "get_model"]

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
