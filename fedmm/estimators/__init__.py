"""scikit-learn front doors: :class:`FederatedGaussianMixture` and :class:`FederatedMixtureRegression`.

The estimators hold the model's and the fit's options, check them, and translate between the user's
data layout and the internal one; the estimation itself is the chosen method (:mod:`fedmm.methods`)
over a component family (:mod:`fedmm.families`), run through a transport of clients
(:mod:`fedmm.clients`, or :mod:`fedmm.flower` across parties).
"""

from ._base import ClientMixture
from .gaussian import FederatedGaussianMixture
from .regression import FederatedMixtureRegression

__all__ = ["FederatedGaussianMixture", "FederatedMixtureRegression", "ClientMixture"]
