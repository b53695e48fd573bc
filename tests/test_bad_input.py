"""Bad input gets a clear error, never a silent wrong answer or a raw traceback (issue 12)."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from fedmm import (DivergenceError, EmptyComponentWarning, FederatedGaussianMixture, FederatedMixtureRegression,
                   SingularComponentWarning)
from fedmm.methods import METHODS, FedGrEM
from fedmm.data import FederatedData, check_empty_components
from fedmm.engine import run
from fedmm.families import GaussianFamily, MixtureParams
from fedmm.simulate import make_federated_gmm, make_federated_mor

X, _ = make_federated_gmm(n_clients=3, n_samples=60, random_state=0)
XM, YM, _ = make_federated_mor(n_clients=3, n_samples=60, random_state=0)
X_ALL, GROUPS = np.concatenate(X), np.repeat([0, 1, 2], 60)


@pytest.fixture(scope="module", params=["numba", "numpy"])
def gm(request):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FederatedGaussianMixture(5, method="fedgrem", max_iter=30, backend=request.param,
                                        random_state=0).fit(X)


@pytest.mark.parametrize("call", ["predict", "predict_proba", "score", "score_samples"])
def test_points_beyond_float_range_are_refused_not_nan(gm, call):
    with pytest.raises(ValueError, match="whose square overflows float64; rescale it"):
        getattr(gm, call)(X[0] * 1e200, client=0)
    assert np.isfinite(getattr(gm, call)(X[0] * 1e140, client=0)).all()  # far, yet in range: an answer


def test_mixture_regression_refuses_points_beyond_float_range_too():
    mr = FederatedMixtureRegression(2, max_iter=10, random_state=0).fit(XM, YM)
    with pytest.raises(ValueError, match="whose square overflows float64; rescale it"):
        mr.predict_proba(XM[0], YM[0] * 1e200, client=0)


def test_far_rows_are_named_in_the_callers_order(gm):
    far = X_ALL.copy()
    far[100] *= 1e200
    with pytest.raises(ValueError, match="row 100 of X"):
        gm.predict(far, groups=GROUPS)


@pytest.mark.parametrize("client", [True, 1.0, [0, 1], np.array([1]), "1"])
def test_client_must_be_one_id_of_the_fitted_kind(gm, client):
    with pytest.raises(ValueError, match="client must be one fitted client id"):
        gm.predict(X[1], client=client)


def test_numpy_integer_client_ids_are_fine(gm):
    np.testing.assert_array_equal(gm.predict(X[1], client=np.int64(1)), gm.predict(X[1], client=1))


@pytest.mark.parametrize("options, match", [
    (dict(means_init=np.arange(30.0).reshape(3, 10)), r"means_init must have shape .*\(2, 10\).*got \(3, 10\)"),
    (dict(means_init=np.zeros((2, 4))), r"means_init must have shape .*got \(2, 4\)"),
    (dict(means_init=np.zeros((2, 10)), weights_init=[0.2, 0.3, 0.5]), r"weights_init must have shape .*got \(3,\)"),
    (dict(means_init=[["a"] * 10] * 2), "means_init must be an array of real numbers"),
    (dict(means_init=np.full((2, 10), np.nan)), "means_init contains NaN"),
])
def test_initial_values_are_checked_against_n_components_and_the_data(options, match):
    with pytest.raises(ValueError, match=match):
        FederatedGaussianMixture(2, **options).fit(X)


@pytest.mark.parametrize("y, match", [
    ([y + 0j for y in YM], "y must be real numbers"), ([y > 0 for y in YM], "y must be real numbers"),
    ([y.astype(str) for y in YM], "y must be real numbers"),
])
def test_responses_must_be_real(y, match):
    with pytest.raises(ValueError, match=match):
        FederatedMixtureRegression(2).fit(XM, y)


def test_object_arrays_of_numbers_are_read_as_numbers():
    a = FederatedMixtureRegression(2, max_iter=5, random_state=0).fit(XM, [y.astype(object) for y in YM])
    b = FederatedMixtureRegression(2, max_iter=5, random_state=0).fit(XM, YM)
    np.testing.assert_array_equal(a.coef_, b.coef_)


@pytest.mark.parametrize("X_, groups, error, match", [
    (sp.csr_matrix(X_ALL), GROUPS, TypeError, "sparse"),
    ([sp.csr_matrix(x) for x in X], None, TypeError, "sparse"),
    ((x for x in X), None, TypeError, "generator, which can be read only once"),
    ([[[1.0, 2.0], [3.0]], [[1.0, 2.0], [3.0, 4.0]]], None, ValueError, "client 0: X is ragged"),
    (X_ALL, np.array([0, "a"] * 90, dtype=object), ValueError, "all numbers or all strings"),
    (X_ALL, np.array([None, 1] * 90, dtype=object), ValueError, "all numbers or all strings"),
    (X_ALL, np.where(np.arange(180) == 5, np.nan, GROUPS), ValueError, "groups contains NaN"),
    ([X[0][:, :5], X[1], X[2]], None, ValueError, "client 0 has 5"),
    (np.where(np.arange(180)[:, None] == 100, np.nan, X_ALL), GROUPS, ValueError, "row 100 of X"),
    (X_ALL, GROUPS + 10, None, None),
])
def test_data_errors_say_what_was_expected(X_, groups, error, match):
    if error is None:  # the control: the same data, well formed
        FederatedData.from_input(X_, groups=groups)
        return
    with pytest.raises(error, match=match):
        FederatedData.from_input(X_, groups=groups)


def test_errors_name_the_callers_client_id():
    with pytest.raises(ValueError, match="client 'b'"):
        FederatedData.from_input(np.where(np.arange(180)[:, None] == 70, np.nan, X_ALL),
                                 groups=np.array(["a", "b", "c"])[GROUPS])


def test_prediction_errors_name_the_fitted_client_id():
    gm = FederatedGaussianMixture(2, max_iter=5, random_state=0).fit(X_ALL, groups=GROUPS + 10)
    with pytest.raises(ValueError, match="client 11: X has 3 features, but FederatedGaussianMixture is expecting 10"):
        gm.predict(X[1][:, :3], client=11)


def test_a_scalar_y_with_groups_is_refused():
    with pytest.raises(ValueError, match="y must have one entry per row of X"):
        FederatedMixtureRegression(2).fit(np.concatenate(XM), 3.0, groups=GROUPS)


def test_dataframe_columns_are_kept_and_checked():
    pd = pytest.importorskip("pandas")
    frames = [pd.DataFrame(x, columns=[f"f{j}" for j in range(10)]) for x in X]
    gm = FederatedGaussianMixture(2, max_iter=5, random_state=0).fit(frames)
    assert list(gm.feature_names_in_) == [f"f{j}" for j in range(10)]
    np.testing.assert_array_equal(gm.predict(frames[0], client=0), gm.predict(X[0], client=0))
    with pytest.raises(ValueError, match="not the fitted ones"):
        gm.predict(frames[0][frames[0].columns[::-1]], client=0)
    assert not hasattr(FederatedGaussianMixture(2, max_iter=5).fit(X), "feature_names_in_")


def test_divergence_advice_fits_the_method():
    """EM on two clients of one repeated point with reg_covar = 0: the variance is 0, the density infinite.
    The advice is about the data and reg_covar, not step sizes (EM has none)."""
    flat = [np.zeros((20, 2)), np.zeros((20, 2))]
    with pytest.raises(DivergenceError, match="reg_covar") as err:
        FederatedGaussianMixture(2, method="local-em", reg_covar=0.0).fit(flat)
    assert "C_eta" not in str(err.value)


def test_an_unconverged_central_problem_warns():
    Xs, truth = make_federated_gmm(4, 100, h=2.0, random_state=0)
    K, R, _ = truth.theta.shape
    start = MixtureParams(np.full((K, R), 1 / R), truth.theta, np.ones((K, R, 1)))
    with pytest.warns(UserWarning, match="central problem stopped unconverged"):
        run(METHODS["fedgrem"](central_max_iter=1, penalty=3.0, center_restarts=0), GaussianFamily(),
            FederatedData.from_input(Xs), start, 3, 0.0)


# A per-client fit that gives a component fewer samples than its variance needs is singular; it warns, naming the
# clients, and a fit with enough samples per component does not (docs/units.md).
TINY = [np.random.RandomState(k).standard_normal((6, 2)) for k in range(4)]


@pytest.mark.parametrize("method", ["local-em", "local-grem"])
def test_per_client_fits_warn_about_singular_components(method):
    with pytest.warns(SingularComponentWarning, match=r"rest on fewer than 2 samples of their client, in client 0"):
        gm = FederatedGaussianMixture(5, method=method, max_iter=20, random_state=0).fit(TINY)
    N = np.array([len(x) for x in TINY])[:, None] * gm.weights_
    assert np.array_equal(gm.singular_components_, (N >= 0.5) & (N < 2)) and gm.singular_components_.any()


def test_the_warning_follows_the_family_size_and_the_callers_ids():
    x = [np.linspace(0.0, 1.0, 8)[:, None] + 0.01 * k for k in range(3)]
    y = [np.random.RandomState(k).standard_normal(8) for k in range(3)]
    with pytest.warns(SingularComponentWarning, match=r"fewer than 3 samples of their client, in client 'a'"):
        FederatedMixtureRegression(3, method="local-em", max_iter=20, random_state=0).fit(
            np.concatenate(x), np.concatenate(y), groups=np.repeat(["a", "b", "c"], 8))


def test_no_warning_without_a_per_client_variance():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gm = FederatedGaussianMixture(5, method="local-em", covariance_type="identity", max_iter=20,
                                      random_state=0).fit(TINY)
    assert gm.singular_components_.shape == (4, 5) and not gm.singular_components_.any()


def test_no_warning_with_enough_samples_per_component():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", category=ConvergenceWarning)
        for method in ("local-em", "fedgrem", "pooled-em"):
            gm = FederatedGaussianMixture(5, method=method, max_iter=20, random_state=0).fit(X)
            assert not gm.singular_components_.any()
        FederatedMixtureRegression(2, method="local-em", max_iter=20, random_state=0).fit(XM, YM)


def test_minimum_component_sizes():
    assert [GaussianFamily(c).min_component_size(4) for c in ("identity", "spherical", "diag", "tied", "full")] \
        == [0, 2, 2, 0, 5]
    from fedmm.families import RegressionFamily
    regressions = [RegressionFamily(fit_intercept=i, noise_variance=v)
                   for i, v in ((True, "component"), (False, "component"), (True, "shared"), (True, 1.0))]
    assert [f.min_component_size(f.param_dim(3)) for f in regressions] == [5, 4, 4, 4]


def _far_triple(d=5):
    """Two clusters of 60 samples in R^d on three clients and three far samples: the three need a component of
    their own, which with a full covariance holds fewer than the d + 1 samples its covariance needs."""
    rng = np.random.RandomState(0)
    X = np.vstack([rng.standard_normal((60, d)), 8.0 + rng.standard_normal((60, d)), 50.0 + rng.standard_normal((3, d))])
    return X, np.arange(len(X)) % 3


@pytest.mark.parametrize("method", ["pooled-em", "fedgrem"])
def test_a_component_singular_over_all_clients_warns(method):
    X, groups = _far_triple()
    # FedGrEM with the paper's schedule reaches the collapsed fit (floored SURE's other maximizer is regular).
    paper = METHODS[method](penalty="paper") if method == "fedgrem" else method
    with pytest.warns(SingularComponentWarning, match=r"Component\(s\) \d .*hold fewer than 6 samples over all clients"):
        gm = FederatedGaussianMixture(3, method=paper, covariance_type="full", max_iter=50,
                                      random_state=0).fit(X, groups=groups)
    singular = gm.singular_components_
    assert singular[0].any() and (singular == singular[0]).all()  # the same components, on every client
    with warnings.catch_warnings():  # two samples are enough for diagonal variances
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", category=ConvergenceWarning)
        gm = FederatedGaussianMixture(3, method=method, covariance_type="diag", max_iter=50, random_state=0).fit(
            X, groups=groups)
    assert sorted(np.round(gm.weights_.T @ np.bincount(groups))) == [3, 60, 60]


def test_empty_components_are_not_singular():
    from fedmm.data import singular_components
    assert not singular_components([[30.0, 0.0], [29.6, 0.4]], 2).any()
    assert singular_components([[30.0, 0.0], [29.0, 1.0]], 2).tolist() == [[False, False], [False, True]]
    assert not singular_components([[30.0, 1.0]], 0).any()
    # Pooled over clients: the totals decide, on every client.
    assert singular_components([[0.6, 0.0], [0.6, 40.0]], 2, per_client=False).tolist() == [[True, False]] * 2
    assert not singular_components([[1.0, 30.0], [1.0, 40.0]], 2, per_client=False).any()


def test_a_fit_whose_components_empty_everywhere_says_so():
    """The paper's FedEM (its average weighting clients by n_k / n, from one client's start) empties two of
    three regression components on the diabetes data (5 random clients): the fit is one line, and it warns
    and says which components; pooled EM from the same kind of start keeps all three, silently."""
    from sklearn.datasets import load_diabetes
    from fedmm.methods import FedEM
    X, y = load_diabetes(return_X_y=True)
    groups = np.random.RandomState(0).randint(5, size=len(y))
    with pytest.warns(EmptyComponentWarning, match=r"Component\(s\) 1, 2 are empty on every client.*mixture of 1 of"):
        fit = FederatedMixtureRegression(3, method=FedEM(aggregation="samples"), init="common",
                                         random_state=0).fit(X, y, groups=groups)
    np.testing.assert_array_equal(fit.empty_components_, [False, True, True])
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyComponentWarning)
        fit = FederatedMixtureRegression(3, method="pooled-em", random_state=0).fit(X, y, groups=groups)
    assert not fit.empty_components_.any()


def test_check_empty_components_sums_over_clients():
    N = np.array([[10.0, 0.3, 0.0], [5.0, 0.1, 2.0]])     # component 1: 0.4 samples in all; 2: 2 samples
    with pytest.warns(EmptyComponentWarning, match=r"Component\(s\) 1 are empty.*mixture of 2 of the n_components=3"):
        np.testing.assert_array_equal(check_empty_components(N), [False, True, False])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not check_empty_components(N[:, [0, 2]]).any()


# --- what a fuzz of bad inputs found (issue 42): each a clear error ------------------------------------

@pytest.mark.parametrize("scale", [1e160, 1e300, 1e-160, 1e-300])
def test_values_whose_squares_overflow_or_underflow_are_refused_with_advice(scale):
    """Units and statistics square the data: beyond 1e150 (or below 1e-150) float64 gives inf or 0, which
    used to become an OverflowError, a DivergenceError blaming repeated points, or one component."""
    with pytest.raises(ValueError, match=r"client 0: X .*(reaches|at most) .* rescale it"):
        FederatedGaussianMixture(2).fit([x * scale for x in X])
    with pytest.raises(ValueError, match=r"client 0: y .*(reaches|at most) .* rescale it"):
        FederatedMixtureRegression(2).fit(XM, [y * scale for y in YM])
    if scale > 1:  # one huge value is enough; one tiny one is a small number like any other
        gm = FederatedGaussianMixture(2, max_iter=5, random_state=0).fit(X)
        big = X[0].copy()
        big[0, 0] = scale
        with pytest.raises(ValueError, match="rescale it"):
            gm.personalize(big)
        with pytest.raises(ValueError, match="rescale it"):
            gm.predict(big, client=0)


@pytest.mark.parametrize("value", [np.nan, -5.0, "high"])
def test_a_penalty_function_must_return_a_number_at_least_zero(value):
    with pytest.raises(ValueError, match=f"penalty function returned {value!r} for round t=1"):
        FederatedMixtureRegression(2, method=FedGrEM(penalty=lambda t: value), max_iter=5).fit(XM, YM)


def test_an_unnamed_array_for_a_model_fitted_on_named_columns_warns_as_in_scikit_learn():
    pd = pytest.importorskip("pandas")
    gm = FederatedGaussianMixture(2, max_iter=5, random_state=0).fit(
        [pd.DataFrame(x, columns=[f"f{j}" for j in range(10)]) for x in X])
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        gm.predict(X[0], client=0)


def test_an_empty_list_and_zero_features_are_clear_errors():
    with pytest.raises(ValueError, match="empty list"):
        FederatedGaussianMixture(2).fit([])
    with pytest.raises(ValueError, match=r"0 feature\(s\)"):
        FederatedGaussianMixture(2).fit([np.zeros((5, 0))])
