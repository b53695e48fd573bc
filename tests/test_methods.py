"""Methods as objects: one registry, parameter objects through the estimators, a method from outside fedmm."""

import inspect
import pickle
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from median_em import MedianEM
from sklearn import config_context
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, KFold

from fedmm import FederatedGaussianMixture, FederatedMixtureRegression
from fedmm import methods as fm
from fedmm.cli import main
from fedmm.simulate import make_federated_gmm
from fedmm.studies import ALL_METHODS, run_study

ROOT = Path(__file__).parent.parent
CENTERS = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])


def _data(K=4, seed=0, **kwargs):
    X, truth = make_federated_gmm(K, 100, centers=CENTERS, random_state=seed, **kwargs)
    return X, truth


# --- one registry -------------------------------------------------------------------

def test_every_method_is_listed_once_by_its_name_and_exported():
    assert all(cls.name == name for name, cls in fm.METHODS.items())
    assert len(set(fm.METHODS.values())) == len(fm.METHODS)
    assert {cls.__name__ for cls in fm.METHODS.values()} <= set(fm.__all__)


def test_the_lists_that_read_the_registry_do_not_drift(capsys):
    """The docs' method table and option table, the estimators' docstrings, the command line's help and
    the studies all name exactly the registered methods."""
    text = (ROOT / "docs" / "methods.md").read_text()
    choice, classes = text.split("## Which method?")[1].split("\n## ")[0], text.split("| method | class |")[1]
    names = lambda table: set(re.findall(r'`"([a-z-]+)"`', "\n".join(line for line in table.splitlines()  # noqa: E731
                                                                      if line.startswith("|"))))
    assert names(choice) == set(fm.METHODS)                                  # which method for which federation
    assert names(classes) == set(fm.METHODS)                                 # each class and its options
    for estimator in (FederatedGaussianMixture, FederatedMixtureRegression):
        assert all(f'"{name}"' in estimator.__doc__ for name in fm.METHODS)
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    shown = "".join(capsys.readouterr().out.split())  # argparse wraps lines at hyphens
    assert [name for name in fm.METHODS if name not in shown] == []
    assert set(ALL_METHODS) <= set(fm.METHODS)


@pytest.mark.parametrize("name", list(fm.METHODS))
def test_each_class_documents_every_option_it_declares(name):
    cls = fm.METHODS[name]
    options = list(inspect.signature(cls).parameters)
    assert set(options) == set(cls._parameter_constraints)
    assert all(option in cls.__doc__ for option in options), name
    cls().validate()


# --- parameter objects ---------------------------------------------------------------

def test_a_fit_uses_a_validated_copy_and_leaves_the_users_object_alone():
    X, _ = _data()
    method = fm.FedGrEM(penalty="paper")
    gm = FederatedGaussianMixture(3, method=method, random_state=0).fit(X)
    assert gm.method is method and gm.method_ is not method
    assert gm.method_.get_params() == method.get_params()
    by_name = FederatedGaussianMixture(3, method="fedgrem", random_state=0).fit(X)
    default = FederatedGaussianMixture(3, method=fm.FedGrEM(), random_state=0).fit(X)
    np.testing.assert_array_equal(by_name.means_, default.means_)   # a name is its class with the defaults


def test_clone_set_params_and_pickle_reach_the_method():
    gm = FederatedGaussianMixture(3, method=fm.FedGrEM(C_eta=0.8), random_state=0)
    assert gm.get_params()["method__C_eta"] == 0.8
    gm.set_params(method__penalty="paper")
    twin = clone(gm)
    assert twin.method is not gm.method and twin.method.get_params() == gm.method.get_params()
    X, _ = _data()
    fitted = pickle.loads(pickle.dumps(gm.fit(X)))
    np.testing.assert_array_equal(fitted.means_, gm.means_)
    assert fitted.method_.penalty == "paper"


def test_grid_search_over_a_method_option():
    """GridSearchCV splits rows; with scikit-learn's metadata routing each split's ``groups`` reach ``fit`` and
    ``score`` (every client has rows in every split)."""
    X, _ = _data(K=3, h=0.5)
    rows, groups = np.vstack(X), np.repeat(np.arange(3), [len(x) for x in X])
    with config_context(enable_metadata_routing=True), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm = FederatedGaussianMixture(3, method=fm.FedGrEM(), max_iter=50, random_state=0)
        gm.set_fit_request(groups=True).set_score_request(groups=True)
        search = GridSearchCV(gm, {"method__penalty": ["paper", np.inf]}, cv=KFold(3, shuffle=True, random_state=0))
        search.fit(rows, groups=groups)
    assert search.best_params_["method__penalty"] in ("paper", np.inf)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert search.best_estimator_.method_.penalty == search.best_params_["method__penalty"]


def test_gather_options_moves_a_methods_own_options_onto_it():
    options = fm.gather_options({"method": "fedgrem", "penalty": "paper", "n_init": 5})
    assert options["n_init"] == 5 and options["method"].penalty == "paper" and len(options) == 2
    assert fm.gather_options({"max_iter": 3})["method"].get_params() == fm.FedGrEM().get_params()


def test_a_study_takes_method_objects_under_labels():
    rows = run_study("gmm", {"fedgrem C=0.8": fm.FedGrEM(C_eta=0.8, penalty="paper"), "local": "local-em"},
                     settings=[{"n_clients": 3, "n_samples": 60}], reps=1, fit_options={"max_iter": 20})
    assert [r["method"] for r in rows] == ["fedgrem C=0.8", "local"]
    with pytest.raises(ValueError, match="Unknown method"):
        run_study("gmm", ["fedavg"], reps=1)


# --- a method written outside fedmm ---------------------------------------------------

@pytest.mark.filterwarnings("ignore::fedmm.EmptyComponentWarning")  # FedEM's fit loses components to the far client
def test_a_method_from_outside_fits_in_one_process_and_resists_what_fedem_does_not():
    """tests/median_em.py, one file with no edit to fedmm: a client drawing far from everyone moves FedEM's
    shared means by about its share of the distance, and the median not at all."""
    X, truth = _data(K=5)
    X[4] = X[4] + 100.0
    fits = {name: FederatedGaussianMixture(3, method=method, random_state=0).fit(X)
            for name, method in (("median", MedianEM()), ("fedem", "fedem"))}
    err = {name: np.abs(np.sort(fit.center_, axis=0) - np.sort(CENTERS, axis=0)).max() for name, fit in fits.items()}
    assert err["median"] < 0.5 < 10 < err["fedem"]
    assert fits["median"].method_.trim == 0.0
    with pytest.raises(ValueError, match="trim must be"):
        FederatedGaussianMixture(3, method=MedianEM(trim=0.7)).fit(X)


@pytest.mark.parametrize("noise, unit", [("central", "client"), ("local", "client"), ("central", "sample")])
def test_a_method_from_outside_opts_into_privacy_with_its_private_form(noise, unit):
    """tests/median_em.py declares its private form, with no edit to fedmm: it fits privately at either level.
    The release is fedmm's, whatever the method: under central noise (and for each row) the clipped average
    (the noisy sums) about its clients' step, FedEM's M-step, so that its private fit is FedEM's bit for bit;
    under local noise its server takes the median of the noisy updates, its own."""
    pytest.importorskip("dp_accounting")
    from fedmm.privacy import DifferentialPrivacy
    X, _ = _data(K=6)
    dp = DifferentialPrivacy(8.0, bounds=(-4.0, 10.0), rounds=9, noise=noise, unit=unit)
    fits = {name: FederatedGaussianMixture(3, method=method, random_state=0, privacy=dp).fit(X)
            for name, method in (("median", MedianEM()), ("fedem", "fedem"))}
    median = fits["median"]
    assert median.n_iter_ == len(median.releases_) == 9 and median.privacy_spent_[0] <= 8.0
    assert np.all(np.isfinite(median.means_)) and isinstance(median.method_, MedianEM)
    same = np.array_equal(median.means_, fits["fedem"].means_)
    assert same == (noise == "central")


def test_a_method_without_a_private_form_is_refused_by_name():
    """A subclass inherits no private form (its rounds may differ): privacy= names it and the methods that run
    privately."""
    pytest.importorskip("dp_accounting")
    from fedmm.privacy import DifferentialPrivacy

    class Subclass(MedianEM):
        pass
    X, _ = _data(K=4)
    with pytest.raises(ValueError, match="runs method='fedem' or 'fedgrem' .*got method='median-em'"):
        FederatedGaussianMixture(3, method=Subclass(), privacy=DifferentialPrivacy(bounds=(-4.0, 10.0))).fit(X)


def test_a_method_from_outside_fits_on_flower_as_in_one_process():
    flower = pytest.importorskip("fedmm.flower")
    from fedmm.flower.testing import LocalGrid
    X, _ = _data(K=4)
    ref = FederatedGaussianMixture(3, method=MedianEM(), random_state=0).fit(X)
    apps = [flower.client_app(lambda ctx, k=k: (X[k], None), methods=[MedianEM]) for k in range(len(X))]
    remote = flower.fit(FederatedGaussianMixture(3, method=MedianEM(), random_state=0), LocalGrid(apps))
    np.testing.assert_allclose(remote.means_, ref.means_, rtol=0, atol=1e-8)
    strangers = [flower.client_app(lambda ctx, k=k: (X[k], None)) for k in range(len(X))]
    with pytest.raises(RuntimeError, match="does not run method 'median-em'"):
        flower.fit(FederatedGaussianMixture(3, method=MedianEM(), random_state=0), LocalGrid(strangers))


def test_the_docs_example_is_this_file():
    """docs/extending.md shows tests/median_em.py's code, which the tests above fit: one source."""
    code = (ROOT / "tests" / "median_em.py").read_text().split('"""', 2)[2].lstrip("\n")
    assert code in (ROOT / "docs" / "extending.md").read_text()
