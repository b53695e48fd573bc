"""scikit-learn's searches on federations (fedmm.model_selection, the estimators' metadata requests): every fit
sees the clients, or a clear error; held-out clients are scored as new ones; rows split within clients."""

import numpy as np
import pytest
import sklearn
from sklearn.model_selection import GridSearchCV, GroupKFold, KFold, cross_val_score

from fedmm import FederatedGaussianMixture, FederatedMixtureRegression
from fedmm.methods import FedEM, FedGrEM
from fedmm.model_selection import ClientKFold
from fedmm.simulate import make_federated_gmm, make_federated_mor

GRID = {"method__penalty": ["sure-floored", "paper"]}
SEEN = []


class Recording(FederatedGaussianMixture):
    """Writes down the client ids every fit receives."""

    def fit(self, X, y=None, groups=None):
        SEEN.append(None if groups is None else np.unique(groups).tolist())
        return super().fit(X, y, groups)


@pytest.fixture(scope="module")
def federation():
    X, _ = make_federated_gmm(6, 60, centers=np.array([[-3.0, 0.0], [3.0, 0.0]]), h=0.5, random_state=0)
    return np.concatenate(X), np.repeat(np.arange(6), [len(x) for x in X])


@pytest.fixture
def routing():
    with sklearn.config_context(enable_metadata_routing=True):
        yield


def _model(cls=FederatedGaussianMixture, **options):
    return cls(2, method=FedGrEM(), max_iter=30, random_state=0, **options)


# --- ClientKFold ----------------------------------------------------------------------------------------------


def test_client_kfold_tests_every_row_once_and_every_client_in_every_fold():
    groups = np.repeat(["a", "b", "c"], [10, 7, 13])
    X = np.zeros((30, 2))
    tested = np.zeros(30, dtype=int)
    sizes = []
    for train, test in ClientKFold(3).split(X, groups=groups):
        tested[test] += 1
        sizes.append(len(test))
        assert set(groups[train]) == set(groups[test]) == {"a", "b", "c"}
        assert not np.intersect1d(train, test).size and len(train) + len(test) == 30
    assert np.all(tested == 1)
    assert max(sizes) - min(sizes) <= 1
    # Without shuffle, interleaved: rows stored in order (by component, by time) spread over every fold.
    first = next(ClientKFold(3).split(X, groups=groups))[1]
    assert first[:4].tolist() == [0, 3, 6, 9]


def test_client_kfold_shuffles_reproducibly_and_says_what_it_needs():
    groups = np.repeat([0, 1], 20)
    X = np.zeros((40, 1))
    a = [test.tolist() for _, test in ClientKFold(4, shuffle=True, random_state=1).split(X, groups=groups)]
    b = [test.tolist() for _, test in ClientKFold(4, shuffle=True, random_state=1).split(X, groups=groups)]
    assert a == b and a != [test.tolist() for _, test in ClientKFold(4).split(X, groups=groups)]
    assert ClientKFold(4).get_n_splits() == 4
    with pytest.raises(ValueError, match="needs groups"):
        next(ClientKFold(3).split(X))
    with pytest.raises(ValueError, match=r"client 1: 2"):
        next(ClientKFold(3).split(np.zeros((22, 1)), groups=np.repeat([0, 1], [20, 2])))
    with pytest.raises(ValueError, match="at least 2"):
        ClientKFold(1)
    with pytest.raises(ValueError, match="shuffle"):
        ClientKFold(3, random_state=0)


def test_the_estimators_and_the_splitter_request_groups_by_default(routing):
    assert ClientKFold().get_metadata_routing().consumes("split", ["groups"]) == {"groups"}
    for cls in (FederatedGaussianMixture, FederatedMixtureRegression):
        routing_ = cls().get_metadata_routing()
        for method in ("fit", "score", "predict", "predict_proba"):
            assert routing_.consumes(method, ["groups"]) == {"groups"}, (cls, method)


# --- searches ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cv", [GroupKFold(3), ClientKFold(3)], ids=["GroupKFold", "ClientKFold"])
def test_without_routing_a_search_given_groups_is_a_clear_error_not_a_pooled_fit(federation, cv):
    X, groups = federation
    with pytest.raises(ValueError, match="enable_metadata_routing=True"):
        GridSearchCV(_model(), GRID, cv=cv).fit(X, groups=groups)


def test_without_routing_groups_given_to_fit_alone_are_a_clear_error_too(federation):
    """With routing off, fit parameters reach fit but nothing reaches score: the fit would have its clients and
    every score would fail (NaN)."""
    X, groups = federation
    with pytest.raises(ValueError, match="never to score"):
        cross_val_score(_model(), X, cv=ClientKFold(3), groups=groups, params={"groups": groups},
                        error_score="raise")


@pytest.mark.parametrize("cv", [GroupKFold(3), ClientKFold(3)], ids=["GroupKFold", "ClientKFold"])
def test_with_routing_every_fit_of_a_search_sees_the_groups(federation, routing, cv):
    X, groups = federation
    SEEN.clear()
    search = GridSearchCV(_model(Recording), GRID, cv=cv).fit(X, groups=groups)
    assert len(SEEN) == 2 * 3 + 1   # every candidate on every fold, and the refit
    assert all(seen is not None for seen in SEEN)
    if isinstance(cv, GroupKFold):   # whole clients held out: each fit has the others
        assert all(len(seen) == 4 for seen in SEEN[:-1])
    else:   # rows held out within clients: each fit has every client
        assert all(seen == list(range(6)) for seen in SEEN)
    assert SEEN[-1] == list(range(6)) and search.best_estimator_.n_clients_ == 6
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))


def test_held_out_clients_are_scored_as_new_clients_through_personalize(federation):
    X, groups = federation
    train, test = groups < 4, groups >= 4
    model = _model().fit(X[train], groups=groups[train])
    new = model.personalize([X[groups == k] for k in (4, 5)])
    expected = np.concatenate([c.score_samples(X[groups == k]) for c, k in zip(new, (4, 5))]).mean()
    assert model.score(X[test], groups=groups[test]) == pytest.approx(expected)
    # Fitted and new clients together: each row under its own client's mixture, the mean over all rows.
    rows = np.concatenate([model.score_samples(X[groups == 0], client=0),
                           new[0].score_samples(X[groups == 4])])
    both = (groups == 0) | (groups == 4)
    assert model.score(X[both], groups=groups[both]) == pytest.approx(rows.mean())
    # Other evaluations still name the unknown client.
    with pytest.raises(ValueError, match=r"Unknown client id\(s\) \[4"):
        model.predict(X[test], groups=groups[test])


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_regressions_held_out_clients_are_scored_with_their_responses(routing):
    X, y, _ = make_federated_mor(n_clients=4, n_samples=80, random_state=0)
    Xa, ya = np.concatenate(X), np.concatenate(y)
    groups = np.repeat(np.arange(4), [len(x) for x in X])
    scores = cross_val_score(FederatedMixtureRegression(2, max_iter=20, random_state=0), Xa, ya, cv=GroupKFold(2),
                             params={"groups": groups})
    assert np.all(np.isfinite(scores))


def test_cross_val_score_with_client_kfold_fits_every_client_under_routing(federation, routing):
    X, groups = federation
    SEEN.clear()
    scores = cross_val_score(_model(Recording), X, cv=ClientKFold(3), params={"groups": groups})
    assert np.all(np.isfinite(scores)) and SEEN == [list(range(6))] * 3
    # Rows split at random across clients (KFold) reach the fit with their client ids too.
    SEEN.clear()
    cross_val_score(_model(Recording), X, cv=KFold(3, shuffle=True, random_state=0), params={"groups": groups})
    assert SEEN == [list(range(6))] * 3


def test_a_list_of_client_arrays_in_a_search_is_a_clear_error(federation, routing):
    X, groups = federation
    clients = [X[groups == k] for k in range(6)]
    with pytest.raises(ValueError, match="not a list of client arrays"):
        cross_val_score(_model(), clients, cv=KFold(3), error_score="raise")


def test_with_routing_and_no_groups_a_search_fits_one_client_as_asked(federation, routing):
    X, _ = federation
    scores = cross_val_score(_model(), X, cv=KFold(3))
    assert np.all(np.isfinite(scores))


# --- nested method options ----------------------------------------------------------------------------------------


def test_nested_method_options_work_with_the_method_given_by_name():
    model = FederatedGaussianMixture(5, method="fedgrem").set_params(method__penalty="paper")
    assert isinstance(model.method, FedGrEM) and model.method.penalty == "paper"
    # method and its option in one call (a grid over both), by name.
    model = FederatedGaussianMixture(5).set_params(method="fedem", method__participation=0.5)
    assert isinstance(model.method, FedEM) and model.method.participation == 0.5
    with pytest.raises(ValueError, match="Unknown method 'nope'"):
        FederatedGaussianMixture(5, method="nope").set_params(method__penalty="paper")
    with pytest.raises(ValueError, match="Invalid parameter"):
        FederatedGaussianMixture(5, method="fedem").set_params(method__penalty="paper")


def test_a_grid_over_methods_by_name_and_an_option_runs(federation, routing):
    X, groups = federation
    search = GridSearchCV(FederatedGaussianMixture(2, max_iter=20, random_state=0),
                          {"method": ["fedgrem"], "method__penalty": ["sure-floored", "paper"]},
                          cv=ClientKFold(2)).fit(X, groups=groups)
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    assert isinstance(search.best_estimator_.method, FedGrEM)
