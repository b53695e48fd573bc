"""Fitted estimators survive pickle, deepcopy and joblib, and predict identically afterwards (issue 11)."""

import copy
import pickle

import joblib
import numpy as np
import pytest

from fedmm import FederatedGaussianMixture, FederatedMixtureRegression
from fedmm.methods import METHODS
from fedmm.simulate import make_federated_gmm, make_federated_mor


def _round_trips(estimator, tmp_path):
    path = tmp_path / "model.joblib"
    joblib.dump(estimator, path)
    return [pickle.loads(pickle.dumps(estimator)), copy.deepcopy(estimator), joblib.load(path)]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_gaussian_mixture_round_trips(method, backend, tmp_path):
    X, _ = make_federated_gmm(n_clients=3, n_samples=60, random_state=0)
    gm = FederatedGaussianMixture(3, method=method, backend=backend, max_iter=20, random_state=0).fit(X)
    for loaded in _round_trips(gm, tmp_path):
        assert all(np.array_equal(a, b) for a, b in zip(loaded.predict(X), gm.predict(X)))
        assert loaded.score(X) == gm.score(X)
        assert loaded.bic(X) == gm.bic(X)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_mixture_regression_round_trips(method, backend, tmp_path):
    if "mor" not in METHODS[method].models:
        pytest.skip(f"{method} fits Gaussian mixtures only (its models)")
    X, y, _ = make_federated_mor(n_clients=3, n_samples=80, random_state=0)
    mr = FederatedMixtureRegression(3, method=method, backend=backend, max_iter=20, random_state=0).fit(X, y)
    for loaded in _round_trips(mr, tmp_path):
        assert all(np.array_equal(a, b) for a, b in zip(loaded.predict(X), mr.predict(X)))
        assert loaded.score(X, y) == mr.score(X, y)
        assert loaded.bic(X, y) == mr.bic(X, y)
