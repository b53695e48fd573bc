"""A model family written outside fedmm (tests/poisson_mixture.py, one file, no edit to fedmm): registered by
being defined, fitted in one process and across Flower's clients, refused what it does not declare."""

import numpy as np
import pytest
from poisson_mixture import FederatedPoissonMixture, PoissonFamily, make_poisson_clients

from fedmm.estimators import MODELS, get_model, simulated_models


def _sorted(rates):
    return rates[np.argsort(rates[:, 0])]


def test_defining_the_estimator_registers_its_model():
    assert MODELS["poisson"] is FederatedPoissonMixture
    assert get_model("gmm").model == "gmm" and get_model("mor").model == "mor"
    with pytest.raises(ValueError, match="Unknown model 'binomial'; the models are"):
        get_model("binomial")


def test_another_class_may_not_take_a_registered_name():
    with pytest.raises(ValueError, match="model='gmm' is fedmm.estimators.gaussian.FederatedGaussianMixture's"):
        type("Impostor", (FederatedPoissonMixture,), {"model": "gmm"})


@pytest.mark.parametrize("method", ["fedem", "fedgrem", "pooled-em", "local-em"])
def test_every_method_recovers_the_rates_in_one_process(method):
    X, rates = make_poisson_clients()
    est = FederatedPoissonMixture(3, method=method, random_state=0).fit(X)
    assert est.means_.shape == (4, 3, 4) and est.weights_.shape == (4, 3)
    assert np.max(np.abs(_sorted(est.center_) - _sorted(rates)) / rates.max()) < 0.05
    np.testing.assert_allclose(est.weights_.sum(axis=1), 1.0)
    labels = est.predict(X)
    assert [len(lab) for lab in labels] == [len(x) for x in X]
    assert np.isfinite(est.score(X)) and np.isfinite(est.bic(X))


def test_a_family_without_a_private_form_or_sparse_rounds_is_refused():
    X, _ = make_poisson_clients(n_clients=2, n_samples=60)
    est = FederatedPoissonMixture(3, method="sparse-fedgrem", init="family", random_state=0)
    with pytest.raises(ValueError, match="sparse-fedgrem' fits Gaussian mixtures and mixtures of regr.*PoissonFamily"):
        est.fit(X)
    assert not PoissonFamily.private_form
    pytest.importorskip("dp_accounting")
    from fedmm.privacy import DifferentialPrivacy
    est = FederatedPoissonMixture(3, method="fedem", random_state=0)
    est.privacy = DifferentialPrivacy(epsilon=8.0, bounds=(0.0, 30.0), rounds=5)   # an estimator that took one
    with pytest.raises(ValueError, match="privacy= needs a family with a private form.*PoissonFamily declares none"):
        est.fit(X)


def test_the_studies_take_the_models_that_declare_a_simulation():
    from fedmm.cli import main
    from fedmm.studies import run_study

    assert "poisson" in MODELS and "poisson" not in simulated_models()
    with pytest.raises(ValueError, match=r"model must be one of \['gmm', 'mor'\].*got 'poisson'"):
        run_study("poisson")
    with pytest.raises(SystemExit):
        main(["simulate", "--model", "poisson"])


@pytest.mark.parametrize("method, init", [("fedem", "auto"), ("fedgrem", "auto"), ("fedgrem", "local-em")])
@pytest.mark.filterwarnings("ignore:method=.* makes no promise")
def test_on_flower_it_gives_the_in_process_fit(method, init):
    pytest.importorskip("flwr")
    from fedmm.flower import client_app, fit
    from fedmm.flower.app import estimator_from_config
    from fedmm.flower.testing import LocalGrid

    X, _ = make_poisson_clients()
    ref = FederatedPoissonMixture(3, method=method, init=init, random_state=0).fit(X)
    apps = [client_app(lambda ctx, k=k: (X[k], None)) for k in range(len(X))]
    remote = fit(estimator_from_config({"model": "poisson", "n-components": 3, "method": method, "init": init}),
                 LocalGrid(apps))
    assert isinstance(remote, FederatedPoissonMixture)
    np.testing.assert_allclose(remote.means_, ref.means_, rtol=0, atol=1e-8)
    np.testing.assert_allclose(remote.weights_, ref.weights_, rtol=0, atol=1e-8)


def test_a_model_without_a_name_is_refused_on_flower():
    pytest.importorskip("flwr")
    from fedmm.flower import fit
    from fedmm.flower.testing import LocalGrid

    class Unnamed(FederatedPoissonMixture):
        model = None

    assert "Unnamed" not in {cls.__name__ for cls in MODELS.values()}
    with pytest.raises(ValueError, match="Unnamed has no model name: a model fitted on Flower needs one"):
        fit(Unnamed(3, method="fedem"), LocalGrid([]))
