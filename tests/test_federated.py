"""Federated by construction (issue 45, item 2): the server side of an in-process fit can be held to what crosses
between parties, its clients' transport, and every method's defaults are run so."""

import warnings

import numpy as np
import pytest

from fedmm import FederatedGaussianMixture, FederatedMixtureRegression
from fedmm.clients import TRANSPORT, LocalClients, Rowless, strict_rows
from fedmm.data import FederatedData
from fedmm.families import GaussianFamily
from fedmm.methods import METHODS
from fedmm.simulate import make_federated_gmm, make_federated_mor


@pytest.mark.parametrize("regression", [False, True], ids=["gmm", "mor"])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_methods_defaults_run_without_the_server_reading_rows(method, regression):
    """Inside strict_rows the server side gets Rowless clients: only the transport, as across parties. A
    default path that pools rows raises there instead of silently working in one process only."""
    if regression and "mor" not in METHODS[method].models:
        pytest.skip(f"{method} fits Gaussian mixtures only (its models)")
    X, _ = make_federated_gmm(6, 80, random_state=0)
    Xr, y, _ = make_federated_mor(6, 120, random_state=0)
    fit = ((lambda: FederatedMixtureRegression(3, method=method, random_state=0).fit(Xr, y)) if regression else
           (lambda: FederatedGaussianMixture(3, method=method, random_state=0).fit(X)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loose = fit()
        with strict_rows():
            strict = fit()
    np.testing.assert_array_equal(strict.params_.theta, loose.params_.theta)


def test_rowless_clients_offer_the_transport_and_refuse_rows():
    X, _ = make_federated_gmm(4, 30, random_state=0)
    view = Rowless(LocalClients(GaussianFamily("diag"), FederatedData.from_input(X)))
    assert all(hasattr(view, name) for name in TRANSPORT if name != "family") and view.n_clients == 4
    with pytest.raises(AttributeError, match="never their rows"):
        view.data
    view.deal_folds(2, [0, 1, 2, 3])
    assert isinstance(view.training(0), Rowless)
