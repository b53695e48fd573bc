"""A new client's mixture: what ``model.personalize`` returns."""

import numpy as np

__all__ = ["ClientMixture"]


class ClientMixture:
    """The mixture of one client that was not among the fitted ones, made by ``model.personalize``.

    Its proportions are its own (FedEM Sec. 2.2 and 3.2: a client unseen at
    training fits them with no round with the others), its components those
    the method gives one more client (:meth:`fedmm.algorithms.Strategy.new_client`:
    the consensus, ``center_`` and the clients' median variances, or under
    FedGrEM shrunk towards it, :func:`fedmm.algorithms.fedgrem.shrunk_client`). It evaluates through the model that
    made it: every method below is the model's own with ``client=`` this object, and the object
    itself can be passed as ``client=`` to the model.

    Attributes
    ----------
    model : FederatedGaussianMixture or FederatedMixtureRegression
    params_ : MixtureParams
        The client's parameters in the data's units (leading client axis of length 1).
    weights_ : ndarray of shape (n_components,)
    """

    def __init__(self, model, params):
        self.model = model
        self.params_ = params

    @property
    def weights_(self):
        return self.params_.weights[0]

    def __repr__(self):
        return f"ClientMixture(weights_={np.round(self.weights_, 3).tolist()})"

    def predict(self, *args):
        """``model.predict(*args, client=self)``."""
        return self.model.predict(*args, client=self)

    def predict_proba(self, *args):
        """``model.predict_proba(*args, client=self)``."""
        return self.model.predict_proba(*args, client=self)

    def score_samples(self, *args):
        """``model.score_samples(*args, client=self)``."""
        return self.model.score_samples(*args, client=self)

    def score(self, *args):
        """``model.score(*args, client=self)``."""
        return self.model.score(*args, client=self)

    def sample(self, *args):
        """``model.sample(*args, client=self)``."""
        return self.model.sample(*args, client=self)
