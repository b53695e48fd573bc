"""scikit-learn front doors: :class:`FederatedGaussianMixture` and :class:`FederatedMixtureRegression`.

The estimators hold the model's and the fit's options, check them, and translate between the user's
data layout and the internal one; the estimation itself is the chosen method (:mod:`fedmm.methods`)
over a component family (:mod:`fedmm.families`), run through a transport of clients
(:mod:`fedmm.clients`, or :mod:`fedmm.flower` across parties). :data:`MODELS` holds every estimator class by
its model's name, a model of one's own (a :class:`FederatedMixture` of a family of one's own) included.
"""

from ._client import ClientMixture
from ._registry import MODELS, Simulation, get_model, simulated_models
from .gaussian import FederatedGaussianMixture
from .mixture import FederatedMixture
from .regression import FederatedMixtureRegression

__all__ = ["FederatedGaussianMixture", "FederatedMixtureRegression", "FederatedMixture", "ClientMixture", "MODELS",
           "Simulation", "get_model", "simulated_models"]
