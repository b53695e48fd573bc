"""Per-client use of a fitted model: clients unseen at training (personalize), sampling, fit_predict, verbose."""

import pickle

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from fedmm import ClientMixture, FederatedGaussianMixture, FederatedMixtureRegression
from fedmm.simulate import make_federated_gmm, make_federated_mor


@pytest.fixture(scope="module")
def gmm():
    X, truth = make_federated_gmm(n_clients=4, n_samples=200, random_state=0)
    return FederatedGaussianMixture(5, random_state=0).fit(X), X


@pytest.fixture(scope="module")
def mor():
    X, y, truth = make_federated_mor(n_clients=4, n_samples=300, random_state=0)
    return FederatedMixtureRegression(3, max_iter=200, random_state=0).fit(X, y), X, y


def test_fedgrem_is_the_default_method():
    assert FederatedGaussianMixture().method == FederatedMixtureRegression().method == "fedgrem"


def test_a_new_client_is_scored_under_its_own_components_and_proportions(gmm):
    """Its components are FedGrEM's for one more client (shrunk towards the centre, ``personalize``)."""
    model, _ = gmm
    X_new, _ = make_federated_gmm(n_clients=1, n_samples=150, random_state=7)
    new = model.personalize(X_new[0])
    assert isinstance(new, ClientMixture) and np.isclose(new.weights_.sum(), 1.0)
    means, cov = new.params_.theta[0], new.params_.scale[0]     # diagonal variances
    assert np.abs(means - model.center_).max() < 1.0
    density = np.array([multivariate_normal(means[r], np.diag(cov[r])).pdf(X_new[0]) for r in range(5)]).T
    np.testing.assert_allclose(new.score_samples(X_new[0]), np.log(density @ new.weights_), rtol=1e-9)
    np.testing.assert_array_equal(new.predict(X_new[0]), (density * new.weights_).argmax(axis=1))
    np.testing.assert_array_equal(model.predict(X_new[0], client=new), new.predict(X_new[0]))
    assert np.isclose(new.score(X_new[0]), new.score_samples(X_new[0]).mean())


def test_a_client_mixture_of_a_fitted_clients_parameters_evaluates_like_that_client(gmm):
    model, X = gmm
    twin = ClientMixture(model, model.params_.take([2]))
    np.testing.assert_array_equal(twin.predict_proba(X[2]), model.predict_proba(X[2], client=2))


def test_a_client_mixture_only_works_with_its_own_model(gmm):
    model, X = gmm
    other = FederatedGaussianMixture(5, method="local-em", random_state=0).fit(X)
    with pytest.raises(ValueError, match="another model"):
        other.predict(X[0], client=model.personalize(X[0]))
    with pytest.raises(ValueError, match="one array"):
        model.predict(X, client=model.personalize(X[0]))


def test_new_regression_clients_predict_and_sample(mor):
    model, X, y = mor
    new = model.personalize(X[1], y[1])
    coef = np.einsum("r,rp->p", new.weights_, model.center_)
    intercept = new.weights_ @ model.center_intercept_
    np.testing.assert_allclose(new.predict(X[1]), X[1] @ coef + intercept, rtol=1e-9)
    assert new.predict_proba(X[1], y[1]).shape == (300, 3)
    assert [c.weights_.shape for c in model.personalize(X[:2], y[:2])] == [(3,), (3,)]


def test_samples_follow_the_clients_mixture(gmm):
    model, _ = gmm
    n = 20000
    X, labels = model.sample(n, client=1)
    w, mu, var = model.weights_[1], model.means_[1], model.covariances_[1]
    np.testing.assert_allclose(np.bincount(labels, minlength=5) / n, w, atol=4 * np.sqrt(0.25 / n))
    for r in range(5):
        Xr = X[labels == r]
        se = np.sqrt(var[r] / len(Xr))
        assert np.all(np.abs(Xr.mean(axis=0) - mu[r]) < 4.5 * se)
        assert np.all(np.abs(Xr.var(axis=0) / var[r] - 1) < 4.5 * np.sqrt(2 / len(Xr)))
    again, _ = model.sample(n, client=1)
    np.testing.assert_array_equal(X, again)  # draws flow from random_state


def test_regression_samples_follow_the_components(mor):
    model, X, _ = mor
    Xn = np.random.RandomState(0).randn(30000, X[0].shape[1])
    y, labels = model.sample(Xn, client=0)
    for r in np.unique(labels):
        rows = labels == r
        design = np.column_stack([Xn[rows], np.ones(rows.sum())])
        fit = np.linalg.lstsq(design, y[rows], rcond=None)[0]
        se = np.sqrt(model.noise_variance_[0, r] / rows.sum())
        assert np.abs(fit[:-1] - model.coef_[0, r]).max() < 5 * se
        assert abs(fit[-1] - model.intercept_[0, r]) < 5 * se


def test_sampling_needs_a_client_when_there_are_several(gmm):
    model, X = gmm
    with pytest.raises(ValueError, match="say whose mixture"):
        model.sample(10)
    with pytest.raises(ValueError, match="n_samples"):
        model.sample(0, client=0)
    single = FederatedGaussianMixture(2, random_state=0).fit([X[0]])
    assert single.sample(3)[0].shape == (3, X[0].shape[1])


def test_regression_fit_predict_is_the_most_probable_component(mor):
    model, X, y = mor
    labels = FederatedMixtureRegression(3, max_iter=200, random_state=0).fit_predict(X, y)
    np.testing.assert_array_equal(labels[0], model.predict_proba(X, y)[0].argmax(axis=1))


def test_client_mixtures_survive_pickling(gmm):
    model, X = gmm
    new = model.personalize(X[0])
    loaded = pickle.loads(pickle.dumps(new))
    np.testing.assert_array_equal(loaded.predict(X[0]), new.predict(X[0]))


def test_verbose_prints_runs_and_rounds(capsys):
    X, _ = make_federated_gmm(n_clients=3, n_samples=100, random_state=0)
    FederatedGaussianMixture(3, random_state=0).fit(X)
    assert capsys.readouterr().out == ""
    FederatedGaussianMixture(3, verbose=1, random_state=0).fit(X)
    out = capsys.readouterr().out
    assert "start 1 of" in out and "log-likelihood per sample" in out and "round" not in out.replace("rounds", "")
    FederatedGaussianMixture(3, verbose=2, max_iter=20, tol=0, random_state=0).fit(X)
    out = capsys.readouterr().out
    assert "round 10:" in out and "round 20:" in out and "pooled_fraction" in out and "round 3:" not in out
