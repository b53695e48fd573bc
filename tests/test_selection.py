"""Model selection (fedmm.selection) and the effective parameter counts behind BIC and ICL."""

import warnings

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from fedmm import FederatedGaussianMixture, FederatedMixtureRegression, SingularComponentWarning
from fedmm.methods import FedGrEM
from fedmm.selection import select_n_components
from fedmm.simulate import make_federated_gmm, make_federated_mor, make_grouped_gmm
from fedmm.robust import client_folds

CENTERS = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])


@pytest.fixture(scope="module")
def data():
    X, truth = make_federated_gmm(4, 100, centers=CENTERS, random_state=0)
    return X


def test_bic_counts_pooled_components_once_and_unpooled_per_client(data):
    """Means: the consensus once where used, each unpooled client by the group lasso's degrees of freedom
    ``1 + (d - 1) kept``, ``kept = 1 - threshold / distance`` (Yuan & Lin 2006); diagonal variances, which
    follow the means' share (``pool_variances=True``), the consensus once and ``kept d`` per unpooled client
    (the linear shrinkage's trace), and with ``pool_variances=False`` once per distinct value."""
    K, R, d = 4, 3, 2
    n = 4 * 100
    per_component = 2 * d                                             # mean and diagonal variances
    for pool_variances in (True, False):
        model = FederatedGaussianMixture(3, method=FedGrEM(pool_variances=pool_variances), random_state=0).fit(data)
        pooled = model.pooled_
        assert not pooled.all()                                       # the count below has both kinds
        mean_df = variance_df = 0.0
        for r in range(R):
            mean_df += d * pooled[:, r].any()
            variance_df += d * pooled[:, r].any()
            for k in np.flatnonzero(~pooled[:, r]):
                kept = 1 - model.pooling_threshold_[k, r] / model.distance_to_center_[k, r]
                assert 0 <= kept < 1
                mean_df += 1 + (d - 1) * kept
                variance_df += d * kept
        if not pool_variances:                                        # every client keeps its own
            variance_df = d * K * R
        expected = K * (R - 1) + mean_df + variance_df
        loglik = sum(model.score_samples(data)[k].sum() for k in range(K))
        assert np.isclose(model.bic(data), -2 * loglik + np.log(n) * expected)
    local = FederatedGaussianMixture(3, method="local-em", random_state=0).fit(data)
    assert np.isclose(local._n_parameters(np.arange(K)), K * (R - 1 + R * per_component))
    fedem = FederatedGaussianMixture(3, method="fedem", random_state=0).fit(data)
    assert np.isclose(fedem._n_parameters(np.arange(K)), K * (R - 1) + R * per_component)
    # One client's BIC counts that client's parameters only.
    one = model._n_parameters(np.array([1]))
    assert (R - 1) + R * (d + 1) <= one <= (R - 1) + per_component * R


def test_bic_counts_each_groups_centre():
    """With two groups of clients (far apart), every component has two centres that hold clients: BIC counts
    both (it counted one whatever the groups, undercounting grouped fits)."""
    X, _, groups = make_grouped_gmm(n_groups=2, clients_per_group=4, n_samples=100, spread=6.0, outlier=False,
                                    random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = FederatedGaussianMixture(3, covariance_type="spherical", random_state=0).fit(X)
    assert adjusted_rand_score(groups, model.groups_) == 1.0 and model.pooled_.all()
    means, scales = model.method_.distinct_components(model, np.arange(len(X)), X[0].shape[1], True)
    np.testing.assert_array_equal(means, 2.0)


def test_icl_adds_the_classification_entropy(data):
    model = FederatedGaussianMixture(3, random_state=0).fit(data)
    proba = np.concatenate(model.predict_proba(data))
    entropy = -np.log(proba.max(axis=1)).sum()
    assert np.isclose(model.icl(data), model.bic(data) + 2 * entropy)
    new = model.personalize(data[0])
    assert np.isclose(model.bic(data[0], client=new) - model.icl(data[0], client=new),
                      2 * np.log(new.predict_proba(data[0]).max(axis=1)).sum())


@pytest.mark.parametrize("criterion", ["icl", "cv"])
def test_selection_finds_well_separated_components(data, criterion):
    selection = select_n_components(FederatedGaussianMixture(max_iter=100, random_state=0), data,
                                    n_components=[2, 3, 4], criterion=criterion, n_folds=3, random_state=0)
    assert selection.best_params == {"n_components": 3, "covariance_type": "diag"}
    assert list(selection.table["n_components"]) == [2, 3, 4]
    assert selection.best_estimator.n_components == 3 and selection.best_estimator.converged_
    assert np.argmin(selection.table["score"]) == 1


def test_bic_finds_well_separated_components_in_most_federations():
    """BIC over federations drawn alike: right in at least 5 of 6. Not in every one: a FedGrEM fit with
    the paper's threshold can leave a small component unpooled at h = 0 (its noise above the threshold),
    whose degrees of freedom BIC charges, while an over-split fit that pools everything is charged less
    (the first federation: R = 4 pooled, 28 parameters, against R = 3 with three client components
    unpooled, 29.5)."""
    right = 0
    for seed in range(6):
        X, _ = make_federated_gmm(4, 100, centers=CENTERS, random_state=seed)
        selection = select_n_components(FederatedGaussianMixture(max_iter=100, random_state=0), X,
                                        n_components=[2, 3, 4], criterion="bic", random_state=0)
        assert list(selection.table["n_components"]) == [2, 3, 4]
        right += selection.best_params == {"n_components": 3, "covariance_type": "diag"}
    assert right >= 5


def test_selection_over_covariance_types_and_with_groups(data):
    X = np.concatenate(data)
    groups = np.repeat(np.arange(4), 100)
    selection = select_n_components(FederatedGaussianMixture(method="fedem", random_state=0), X, groups=groups,
                                    n_components=[2, 3], covariance_types=["spherical", "diag"])
    assert list(selection.table["covariance_type"]) == ["spherical", "spherical", "diag", "diag"]
    assert selection.best_params["n_components"] == 3
    assert selection.best_estimator.method == "fedem"


@pytest.mark.slow  # 3 s: in CI's slow steps (.ci/run), so that the default run stays under 5 minutes
def test_selection_for_regressions():
    X, y, truth = make_federated_mor(3, 300, centers=np.array([[4.0, 0.0], [-4.0, 2.0]]), random_state=0)
    selection = select_n_components(FederatedMixtureRegression(n_init=3, random_state=0), X, y,
                                    n_components=[1, 2, 3])
    assert selection.best_params == {"n_components": 2}
    with pytest.raises(ValueError, match="covariance_types"):
        select_n_components(FederatedMixtureRegression(), X, y, covariance_types=["diag"])


def test_cross_validation_trims_an_outlier_client():
    X, truth = make_federated_gmm(5, 100, centers=CENTERS, random_state=1)
    X[4] = X[4] * 20.0 + 50.0                        # a client whose held-out likelihood is far lower
    selection = select_n_components(FederatedGaussianMixture(max_iter=100, random_state=0), X, n_components=[2, 3, 4],
                                    criterion="cv", n_folds=3, trim=0.2, random_state=0)
    assert selection.best_params["n_components"] == 3


def test_folds_are_even_within_every_client():
    folds = client_folds([10, 7], 3, np.random.RandomState(0))
    assert [np.bincount(f).tolist() for f in folds] == [[4, 3, 3], [3, 2, 2]]


def test_bad_arguments_are_refused(data):
    est = FederatedGaussianMixture()
    with pytest.raises(ValueError, match="criterion"):
        select_n_components(est, data, criterion="aic2")
    with pytest.raises(ValueError, match="n_components"):
        select_n_components(est, data, n_components=[0, 1])
    with pytest.raises(ValueError, match="n_folds"):
        select_n_components(est, data, criterion="cv", n_folds=1)


def test_the_selection_plot(data, tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    selection = select_n_components(FederatedGaussianMixture(max_iter=50, random_state=0), data, n_components=[2, 3],
                                    criterion="bic")
    ax = selection.plot()
    ax.figure.savefig(tmp_path / "selection.png")
    assert (tmp_path / "selection.png").stat().st_size > 0


def test_bic_prefers_full_covariances_for_correlated_components():
    """Two components stretched along different diagonals: diagonal variances need extra components
    to follow the correlation, full covariances do not."""
    rng = np.random.RandomState(5)
    cov = np.array([[[2.0, 1.8], [1.8, 2.0]], [[2.0, -1.8], [-1.8, 2.0]]])
    X = []
    for _ in range(3):
        z = rng.randint(2, size=300)
        X.append(np.array([[0.0, 0.0], [8.0, 0.0]])[z] + np.einsum("nij,nj->ni", np.linalg.cholesky(cov)[z],
                                                                  rng.randn(300, 2)))
    selection = select_n_components(FederatedGaussianMixture(random_state=0), X, n_components=[1, 2, 3, 4],
                                    covariance_types=["diag", "tied", "full"], criterion="bic")
    assert selection.best_params == {"n_components": 2, "covariance_type": "full"}


def test_fits_with_singular_components_get_no_bic_and_are_not_chosen():
    """mclust's NA: three far samples need a component, which with full covariances in R^5 holds fewer than the
    six samples its covariance needs; its huge likelihood would otherwise win BIC."""
    rng = np.random.RandomState(0)
    X = np.vstack([rng.standard_normal((60, 5)), 8.0 + rng.standard_normal((60, 5)), 50.0 + rng.standard_normal((3, 5))])
    groups = np.arange(len(X)) % 3
    with warnings.catch_warnings():
        warnings.simplefilter("error", SingularComponentWarning)  # reported in the table, not printed
        selection = select_n_components(FederatedGaussianMixture(method="pooled-em", random_state=0), X,
                                        groups=groups, n_components=[2, 3], covariance_types=["full", "diag"])
    score = dict(zip(zip(selection.table["covariance_type"], selection.table["n_components"]), selection.table["score"]))
    assert np.isnan(score[("full", 3)]) and np.isfinite(score[("diag", 3)])
    assert selection.best_params == {"n_components": 3, "covariance_type": "diag"}
    with pytest.raises(ValueError, match="Every setting's fit has singular components"):
        select_n_components(FederatedGaussianMixture(method="pooled-em", random_state=0), X, groups=groups,
                            n_components=[3], covariance_types=["full"])


def test_cross_validation_scores_only_clients_with_held_out_samples():
    """A client of one sample is never held out (fedmm.robust.client_fold): it trains in every fold and
    has no held-out score. A score of 0 for it would lift the trimmed mean of these clients' held-out
    log-likelihoods (about -17 nats per sample at this scale) by about 3."""
    X, _ = make_federated_gmm(4, 60, centers=np.array([[0.0, 0.0], [6.0, 0.0]]), random_state=2)
    X = [x * 1000.0 for x in X] + [X[0][:1] * 1000.0]
    selection = select_n_components(FederatedGaussianMixture(max_iter=50, random_state=0), X, n_components=[2],
                                    criterion="cv", n_folds=3, trim=0.0, random_state=0)
    in_sample = np.mean([selection.best_estimator.score_samples(x, client=k).mean() for k, x in enumerate(X[:4])])
    assert abs(-selection.table["score"][0] - in_sample) < 0.5


def test_the_default_criterion_is_the_methods_own(data):
    """criterion="auto": for FedGrEM, whose parameter count falls as components pool, the fewer of BIC's and
    held-out likelihood's choices, and of ICL's where the clients differ (issues 43 and 61: each alone missed on
    heterogeneous federations); BIC for the others."""
    assert FedGrEM().selection_criterion == "fewest"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fedgrem = select_n_components(FederatedGaussianMixture(max_iter=50, random_state=0), data,
                                      n_components=[2, 3], random_state=0)
        fedem = select_n_components(FederatedGaussianMixture(method="fedem", max_iter=50, random_state=0), data,
                                    n_components=[2, 3], random_state=0)
    assert fedgrem.criterion == "fewest" and fedem.criterion == "bic"
    assert set(fedgrem.table) == {"n_components", "covariance_type", "score", "bic", "icl", "clients_differ"}
    assert fedgrem.best_params["n_components"] == fedem.best_params["n_components"] == 3


def test_fewest_takes_the_fewer_components_of_bic_and_cv_and_of_icl_where_clients_differ(data, monkeypatch):
    """Issue 61: where BIC and held-out likelihood both choose a component that follows the clients' differences,
    ICL's choice is taken; where the chosen fit pools every client, it is not asked."""
    import fedmm.selection as selection
    three, two, one = ({"n_components": R, "covariance_type": "diag"} for R in (3, 2, 1))
    picks = {"cv": three, "bic": two, "icl": one}
    differ = np.array([False, True])                                 # the fits at R = 2 and 3

    def choices(est, Xs, ys, settings, names, *args):
        return [(picks[name], np.zeros(2)) for name in names], None if names == ("cv",) else differ

    monkeypatch.setattr(selection, "_choices", choices)
    model = FederatedGaussianMixture(max_iter=20, random_state=0)
    fewest = lambda: select_n_components(model, data, n_components=[2, 3], criterion="fewest").best_params  # noqa: E731
    assert fewest() == two                                           # BIC's: its fit pools every client
    picks["bic"] = three
    assert fewest() == one                                           # both chose R = 3, whose clients differ
    picks["icl"] = picks["bic"] = {"n_components": 3, "covariance_type": "spherical"}
    assert fewest() == three                                         # a tie: cross-validation's


def test_fewest_scores_bic_and_icl_on_the_same_fits(data):
    selection = select_n_components(FederatedGaussianMixture(max_iter=50, random_state=0), data, n_components=[2, 3],
                                    criterion="fewest", n_folds=2, random_state=0)
    table = selection.table
    for R, bic, icl, differ in zip(table["n_components"], table["bic"], table["icl"], table["clients_differ"]):
        model = FederatedGaussianMixture(R, max_iter=50, random_state=0).fit(data)
        assert np.isclose(model.bic(data), bic) and np.isclose(model.icl(data), icl)
        assert differ == (not model.pooled_.all())
