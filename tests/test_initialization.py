import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from fedmm import FederatedGaussianMixture, FederatedMixtureRegression
from fedmm.methods import METHODS
from fedmm.algorithms._base import em_update
from fedmm.data import FederatedData
from fedmm.families import GaussianFamily, pool_stats
from fedmm.clients import LocalClients
from fedmm.initialization import clustered_start, make_starts, trimmed_pooled_start
from fedmm.metrics import estimation_errors
from fedmm.simulate import make_federated_gmm, make_federated_mor

CENTERS = np.array([[0.0, 0.0], [8.0, 0.0], [0.0, 8.0], [8.0, 8.0]])


def _starts(method, init, X, **kw):
    data = FederatedData.from_input(X)
    options = dict(init=init, n_init=2, max_iter=50, tol=1e-4, alignment="consensus",
                   random_state=np.random.RandomState(0))
    options.update(kw)
    return make_starts(GaussianFamily(), METHODS[method](), data, 4, **options)


def test_local_em_start_is_aligned_across_clients():
    X, truth = make_federated_gmm(6, 200, centers=CENTERS, h=0.3, random_state=0)
    (start, alignment, _), = _starts("local-grem", "local-em", X)
    assert alignment is not None and alignment.perms.shape == (6, 4)
    # Aligned: component r sits near the same centre on every client.
    spread = np.linalg.norm(start.theta - start.theta[0], axis=-1).max()
    assert spread < 2.0  # centres are 8 apart; clients within h = 0.3, estimates within ~0.5


def test_common_start_is_one_start_broadcast_with_uniform_weights():
    X, _ = make_federated_gmm(5, 100, centers=CENTERS, random_state=1)
    starts = _starts("local-em", "common", X)
    assert len(starts) == 2
    for start, alignment, _ in starts:
        assert alignment is None
        np.testing.assert_array_equal(start.theta, np.broadcast_to(start.theta[0], start.theta.shape))
        np.testing.assert_allclose(start.weights, 0.25)


def test_family_starts_of_pooled_methods_are_shared():
    X, _ = make_federated_gmm(3, 100, centers=CENTERS, random_state=2)
    for start, alignment, _ in _starts("pooled-em", "auto", X):
        np.testing.assert_array_equal(start.theta[0], start.theta[2])


def test_local_em_start_is_refused_for_shared_methods():
    X, _ = make_federated_gmm(2, 50, centers=CENTERS, random_state=3)
    with pytest.raises(ValueError, match="shares one estimate"):
        _starts("pooled-grem", "local-em", X)
    with pytest.raises(ValueError, match="Unknown init"):
        _starts("local-em", "kmeans++", X)


def test_user_start_is_used_as_given():
    X, truth = make_federated_gmm(3, 300, centers=CENTERS, random_state=4)
    gm = FederatedGaussianMixture(4, means_init=truth.theta, weights_init=truth.weights, max_iter=1,
                                  alignment=None)
    with pytest.warns(ConvergenceWarning):
        gm.fit(X)
    # One EM round from the truth stays next to the truth, in the truth's labels (no relabelling).
    w_err, t_err = estimation_errors(gm.weights_, gm.means_, truth.weights, truth.theta)
    assert np.all(np.linalg.norm(gm.means_ - truth.theta, axis=-1).max(axis=1) == t_err)
    assert gm.alignment_ is None and t_err.max() < 0.6


def test_user_start_shape_errors():
    X, _ = make_federated_gmm(3, 50, centers=CENTERS, random_state=5)
    with pytest.raises(ValueError, match="shape"):
        FederatedGaussianMixture(4, means_init=np.zeros((2, 4, 2))).fit(X)
    with pytest.raises(ValueError, match="sum to 1"):
        FederatedGaussianMixture(4, means_init=np.zeros((4, 2)), weights_init=np.ones(4)).fit(X)
    with pytest.raises(ValueError, match="weights_init needs means_init"):
        FederatedGaussianMixture(4, weights_init=np.ones(4) / 4).fit(X)


def test_mor_coef_init_with_intercept():
    X, y, truth = make_federated_mor(2, 400, centers=np.array([[3.0, 0.0], [-3.0, 1.0]]), random_state=6)
    mr = FederatedMixtureRegression(2, coef_init=truth.centers, tol=1e-6, max_iter=200).fit(X, y)
    np.testing.assert_allclose(mr.intercept_, 0.0, atol=0.3)
    _, err = estimation_errors(mr.weights_, mr.coef_, truth.weights, truth.theta)
    assert err.max() < 4 * np.sqrt(2 / (400 * truth.weights.min()))


def test_local_methods_report_aligned_labels_and_the_permutations():
    X, truth = make_federated_gmm(5, 300, centers=CENTERS, h=0.3, random_state=7)
    gm = FederatedGaussianMixture(4, method="local-em", n_init=2, random_state=0).fit(X)
    assert gm.alignment_.perms.shape == (5, 4) and gm.alignment_.method == "consensus"
    assert np.linalg.norm(gm.means_ - gm.means_[0], axis=-1).max() < 2.0
    raw = FederatedGaussianMixture(4, method="local-em", n_init=2, random_state=0, alignment=None).fit(X)
    # Same estimates, relabelled by the recorded permutations.
    np.testing.assert_allclose(raw.params_.permute(gm.alignment_.perms).theta, gm.means_)
    assert raw.alignment_ is None


def test_a_client_too_small_for_its_own_start_gets_a_clear_error_and_federated_starts_work():
    X, _ = make_federated_gmm(3, 100, centers=CENTERS, random_state=8)
    X[1] = X[1][:2]
    with pytest.warns(UserWarning, match="client 1"):
        with pytest.raises(ValueError, match="client 1 has 2 samples.*init='common'"):
            FederatedGaussianMixture(4, method="fedgrem", init="local-em").fit(X)
    for init in ("common", "trimmed-pooled"):  # the latter is FedGrEM's default
        with pytest.warns(UserWarning, match="client 1"):
            gm = FederatedGaussianMixture(4, method="fedgrem", init=init, n_init=3, random_state=0).fit(X)
        assert np.all(np.isfinite(gm.means_))


def _outlier_design(seed=2):
    X, truth = make_federated_gmm(8, 300, centers=CENTERS, h=0.0, random_state=seed)
    X[5] = 3.0 * np.random.RandomState(0).randn(300, 2) + 20.0
    return X, truth


def test_trimmed_pooled_start_is_not_captured_by_an_outlier_client():
    """Pooled EM gives the outlier client (300 samples far away) a component of its own; trimming the
    client the fit explains worst keeps every component on the honest clients' data: within
    4 sqrt(d / n_r) of the truth (n_r about 7 * 300 / 4 samples per component)."""
    X, truth = _outlier_design()
    family = GaussianFamily("diag")
    data = FederatedData.from_input(X)
    start = trimmed_pooled_start(family, LocalClients(family, data), 4, 2, 200, 1e-6, np.random.RandomState(0))
    honest = np.delete(np.arange(8), 5)
    w_err, err = estimation_errors(start.weights[honest], start.theta[honest], truth.weights[honest],
                                   truth.theta[honest])
    assert err.max() < 4 * np.sqrt(2 / (7 * 300 / 4))
    # Every client fitted its own proportions to the shared components: within 4 sqrt(w (1 - w) / n).
    assert w_err.max() < 4 * np.sqrt(0.25 / 300)
    pooled = FederatedGaussianMixture(4, method="pooled-em", covariance_type="diag", n_init=2, random_state=0).fit(X)
    _, err_pooled = estimation_errors(pooled.weights_[honest], pooled.means_[honest], truth.weights[honest],
                                      truth.theta[honest])
    assert err_pooled.max() > 1.0


def test_fedgrem_from_the_trimmed_pooled_start_leaves_the_outliers_data_unpooled():
    """From the default start the outlier's occupied components stay its own (its empty ones may sit at
    the centre, where they cost nothing), it is ranked first, and the centre ignores it."""
    X, truth = _outlier_design()
    gm = FederatedGaussianMixture(4, method="fedgrem", n_init=2, random_state=0).fit(X)
    occupied = gm.weights_[5] > 0.05
    assert not gm.pooled_[5][occupied].any()
    assert gm.suspected_outliers_[0] == 5
    honest = np.delete(np.arange(8), 5)
    _, err = estimation_errors(gm.weights_[honest], gm.means_[honest], truth.weights[honest], truth.theta[honest])
    assert err.max() < 4 * np.sqrt(2 / (300 / 4))  # the local rate: a client may keep its own estimate
    perm = np.argsort([np.argmin(np.linalg.norm(CENTERS - c, axis=1)) for c in gm.center_])
    assert np.linalg.norm(gm.center_[perm] - CENTERS, axis=1).max() < 4 * np.sqrt(2 / (7 * 300 / 4))


def test_trimmed_pooled_start_fits_every_clients_own_proportions():
    """The start is FedGrEM's model at lambda = infinity: pooled components, each client's own proportions.
    So it is a fixed point of that model's EM step (the kept clients' summed M-step for the components,
    ``N_kr / n_k`` for the proportions), which a pooled fit with shared proportions is not when the
    clients' proportions differ (0.9 / 0.1 and back) and the components overlap (2 sd apart)."""
    rng = np.random.RandomState(0)
    weights = np.array([[0.9, 0.1], [0.1, 0.9], [0.8, 0.2], [0.2, 0.8]])
    X = [np.where(rng.rand(400, 1) < w[0], 0.0, 2.0) + rng.randn(400, 1) for w in weights]
    family = GaussianFamily("diag")
    data = FederatedData.from_input(X)
    start = trimmed_pooled_start(family, LocalClients(family, data), 2, 2, 2000, 1e-12, np.random.RandomState(0))  # 4 clients: none trimmed
    _, stats = family.estep(data, start)
    theta, _ = family.m_step(pool_stats(stats))
    assert np.abs(theta[0] - start.theta[0]).max() < 1e-4
    assert np.abs(stats.N / data.n_samples[:, None] - start.weights).max() < 1e-4
    # Pooled EM with shared proportions reaches another fixed point: the test tells the two apart.
    shared = start
    for _ in range(500):
        _, s = family.estep(data, shared)
        shared = em_update(family, pool_stats(s), data.n_samples.sum(keepdims=True)).broadcast(4)
    assert np.abs(shared.theta[0] - start.theta[0]).max() > 1e-2


@pytest.mark.parametrize("covariance_type", ["identity", "spherical", "diag", "tied", "full"])
def test_the_server_clusters_the_clients_own_starts_into_the_pooled_m_step(covariance_type):
    """k-FED: where every client's own start found the same clusters, the server's clustered start is the
    M-step of the union of the clients' rows so labelled: each component's mean, share and variance (within
    and between the clients' components) from the sums the clients' means and variances stand for."""
    rng = np.random.RandomState(0)
    X = [CENTERS[rng.randint(4, size=n)] + rng.standard_normal((n, 2)) * [1.0, 0.5] for n in (80, 120, 200)]
    family = GaussianFamily(covariance_type)
    data = FederatedData.from_input(X)
    starts = LocalClients(family, data).family_starts([1, 2, 3], 4)
    start = clustered_start(family, starts, data.n_samples.astype(float), 4, np.random.RandomState(0))
    rows = np.vstack(X)
    labels = np.argmin(((rows[:, None] - CENTERS) ** 2).sum(-1), axis=1)
    pooled = FederatedData.from_input([rows])
    theta, scale = family.m_step(family.stats_from_resp(pooled, np.eye(4)[labels]))
    order = [int(np.argmin(np.linalg.norm(start.theta[0] - c, axis=1))) for c in CENTERS]
    np.testing.assert_allclose(start.theta[0, order], theta[0], atol=1e-10)
    np.testing.assert_allclose(start.weights[0, order], np.bincount(labels) / len(rows), atol=1e-12)
    np.testing.assert_allclose(start.scale[0, order], scale[0], atol=1e-5)   # reg_covar (1e-6) counted twice


def test_the_server_matches_regression_starts_by_label():
    """A random partition's labels mean nothing, so the server does not cluster regression starts (it would
    group the clients, whose components all sit near the client's whole-data fit): component r of every
    client joins component r, averaged by the samples it stands for."""
    from fedmm.families import RegressionFamily
    from fedmm.families._base import MixtureParams
    rng = np.random.RandomState(0)
    starts = MixtureParams(rng.dirichlet(np.ones(3), size=4), rng.standard_normal((4, 3, 2)), rng.gamma(2.0, size=(4, 3, 1)))
    sizes = np.array([50.0, 100.0, 150.0, 200.0])
    start = clustered_start(RegressionFamily(), starts, sizes, 3, np.random.RandomState(0))
    mass = sizes[:, None] * starts.weights
    np.testing.assert_allclose(start.theta[0], (mass[..., None] * starts.theta).sum(0) / mass.sum(0)[:, None])
    np.testing.assert_allclose(start.scale[0], (mass[..., None] * starts.scale).sum(0) / mass.sum(0)[:, None])
    np.testing.assert_allclose(start.weights[0], mass.sum(0) / mass.sum())


def test_a_client_in_a_poor_optimum_of_its_own_takes_the_federations_and_the_others_keep_theirs():
    """FedGrEM's local-EM start: each client also climbs from the trimmed pooled start and keeps whichever fits
    its rows better by more than ``tol`` a sample, as with ``n_init`` (at 10^5 clients a few hundred held a
    poor optimum of their own, and a centre of FedGrEM's pooled them)."""
    from fedmm.algorithms.local import LocalEM
    from fedmm.engine import best_of_starts, drive
    from fedmm.initialization import _own_or_federation
    X, _ = make_federated_gmm(4, 200, centers=CENTERS, random_state=0)
    family = GaussianFamily()
    clients = LocalClients(family, FederatedData.from_input(X))
    truth = clients.user_start(np.full(4, 0.25), CENTERS)
    poor = CENTERS.copy()
    poor[1], poor[3] = [0.5, 0.5], [8.0, 4.0]          # two components on one cluster, one between two
    start = truth._replace(theta=truth.theta.copy())
    start.theta[0] = clients.user_start(np.full(4, 0.25), poor).theta[0]

    def run(params, max_iter):
        return drive(clients, [best_of_starts(LocalEM(), family, clients, [params], max_iter, 1e-4)])[0]

    local, shared = run(start, 1), run(truth, 50)              # one EM step from the poor start: still poor
    assert (shared.loglik[0] - local.loglik[0]) / 200 > 0.5
    chosen, loglik = _own_or_federation(family, clients, local, truth, 50, 0.05)
    np.testing.assert_array_equal(loglik, np.r_[shared.loglik[0], local.loglik[1:]])
    np.testing.assert_array_equal(chosen.theta[0], shared.params.theta[0])
    np.testing.assert_array_equal(chosen.theta[1:], local.params.theta[1:])
    np.testing.assert_array_equal(chosen.weights[1:], local.params.weights[1:])
