"""Differential privacy (fedmm.privacy): the accounting, the noise, the clipping, and the private fit."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

dp_accounting = pytest.importorskip("dp_accounting")

from fedmm import FederatedGaussianMixture  # noqa: E402
from fedmm.families import GaussianFamily, MixtureParams  # noqa: E402
from fedmm.methods import METHODS  # noqa: E402
from fedmm.metrics import estimation_errors  # noqa: E402
from fedmm.privacy import (DifferentialPrivacy, OutsideBoundsWarning, PrivateAverage, PrivateClients,  # noqa: E402
                           calibrated_rounds, clip_rows, clip_to_bounds, encode, epsilon_spent, in_the_box, noise_multiplier, personal_components,
                           robust_centre, shared_point, split_component, update_size)
from fedmm.protocol import Broadcast, ClientMessage  # noqa: E402
from fedmm.simulate import make_federated_gmm  # noqa: E402

BOUNDS = (-7.0, 7.0)
#: A noisy fit of a few small clients may lose components: not what these tests are about.
QUIET = pytest.mark.filterwarnings("ignore::fedmm.data.EmptyComponentWarning",
                                   "ignore::fedmm.data.SingularComponentWarning")


@pytest.mark.parametrize("rounds", [1, 10, 100])
def test_the_calibrated_noise_spends_the_budget_by_dp_accountings_own_numbers(rounds):
    """sigma is the smallest whose composition spends epsilon (to dp-accounting's calibration tolerance); the
    RDP epsilon is dp-accounting's RdpAccountant's for the same composition, and no smaller than the tighter
    PLD accountant's, nor, for one release, than the analytic Gaussian mechanism's."""
    epsilon, delta = 2.0, 1e-6
    sigma = noise_multiplier(epsilon, delta, rounds)
    spent = epsilon_spent(sigma, rounds, delta)
    assert 0.99 * epsilon <= spent <= epsilon
    assert epsilon_spent(0.95 * sigma, rounds, delta) > epsilon
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma), rounds)
    rdp = dp_accounting.rdp.RdpAccountant().compose(event)
    assert spent == rdp.get_epsilon(delta)
    pld = dp_accounting.pld.PLDAccountant().compose(event)
    assert pld.get_epsilon(delta) <= spent
    if rounds == 1:
        assert dp_accounting.get_epsilon_gaussian(sigma, delta) <= spent


@settings(max_examples=50, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(1, 8)),
              elements=st.floats(-1e6, 1e6, allow_nan=False)),
       st.floats(1e-3, 1e3))
def test_clipping_bounds_every_contribution_and_keeps_its_direction(v, clip):
    out = clip_rows(v, clip)
    norms = np.linalg.norm(v, axis=1)
    assert np.all(np.linalg.norm(out, axis=1) <= clip * (1 + 1e-12))
    inside = norms <= clip
    np.testing.assert_array_equal(out[inside], v[inside])
    # Shrunk rows point the same way: a non-negative multiple of the row.
    np.testing.assert_allclose(out * norms[:, None], v * np.linalg.norm(out, axis=1)[:, None], rtol=1e-9,
                               atol=1e-9 * (1 + np.abs(v * clip).max()))


def _aggregate(K=20, R=2, d=3, sigma=1.5, clip=0.5, seed=0, n=None):
    """A PrivateAverage with every client sending exactly what it was sent (updates of zero)."""
    family = GaussianFamily("diag")
    rs = np.random.RandomState(seed)
    theta = np.broadcast_to(rs.normal(size=(R, d)), (K, R, d)).copy()
    params = MixtureParams(np.full((K, R), 1.0 / R), theta, np.ones((K, R, d)))
    n = np.full(K, 50.0) if n is None else n
    messages = ClientMessage(n, np.zeros(K), params.weights, params.theta, params.scale)
    average = PrivateAverage(METHODS["fedem"](), family, d, clip, sigma, rs)
    return average, messages, params


def test_the_noise_on_the_aggregate_has_the_calibrated_standard_deviation():
    """Updates of zero (unit variances: the means' own units are the standard ones): what is released is the
    sent components plus the noise alone, whose standard deviation must be sigma times the aggregate's
    sensitivity to one client's rows replaced, the ball's diameter 2 clip times the largest share n_k / n, sizes
    capped at the median one (one client of 10,000 rows among sizes 10 to 190 must not set it). 400 rounds of 14
    coordinates: the sample sd is within 5% of it with probability far above 0.9999 (its relative sd is 1 /
    sqrt(2 * 5600) < 1%)."""
    n = np.append(np.arange(1.0, 20.0) * 10, 10_000.0)
    average, messages, params = _aggregate(n=n, sigma=1.5, clip=0.5)
    server = average.server_start(average.family, params, n)[1]
    for t in range(1, 401):
        average.server_start(average.family, params, n)   # every round from the same point
        average.server_step(messages, server, t)
    noise = np.array([np.concatenate([w - 0.5, (theta - params.theta[0]).ravel(), log_scale.ravel()])
                      for w, theta, log_scale in average.released])  # log(1) = 0
    capped = np.minimum(n, np.median(n))
    expected = 2 * 1.5 * 0.5 * capped.max() / capped.sum()
    assert abs(noise.std() / expected - 1) < 0.05
    assert abs(noise.mean()) < 5 * expected / np.sqrt(noise.size)
    assert average.releases == 400


def _fit(X, bounds=BOUNDS, rounds=30, n_components=5, **options):
    options = {"method": "fedem", "random_state": 0,
               "privacy": DifferentialPrivacy(4.0, 1e-6, bounds=bounds, rounds=rounds), **options}
    return FederatedGaussianMixture(n_components, **options).fit(X)


@QUIET
def test_a_private_fit_runs_its_calibrated_rounds_and_reports_the_privacy_spent():
    X, _ = make_federated_gmm(6, 80, random_state=1)
    model = _fit(X)
    assert model.n_iter_ == 30 and not model.converged_
    epsilon, delta = model.privacy_spent_
    assert 0.99 * 4.0 <= epsilon <= 4.0 and delta == 1e-6
    assert model.noise_multiplier_ == pytest.approx(noise_multiplier(4.0, 1e-6, 30))
    # The units and the start went down; only the rounds came back, and no log-likelihood.
    sent = model.communication_
    assert set(sent["query"]) == {"units", "start", "step"}
    assert (sent["query"] == "step").sum() == 30
    assert sent["bytes_up"][sent["query"] != "step"].sum() == 0
    # What the clients do not release is not reported: no log-likelihood at all, rather than NaN.
    assert not hasattr(model, "log_likelihood_") and not hasattr(model, "lower_bound_")
    assert "log_likelihood" not in model.history_
    # The shared components are the same on every client; the proportions are each client's own.
    np.testing.assert_array_equal(model.means_, np.broadcast_to(model.means_[0], model.means_.shape))
    np.testing.assert_allclose(model.weights_.sum(axis=1), 1.0)


def test_auto_rounds_run_forty_where_a_stage_can_carry_the_fit_and_the_fewest_with_a_warning_where_not():
    """``rounds="auto"``: the clients' clipped pull (at most ``clip`` a round) holds a stage's releases against
    noise of norm ``r clip`` a round where ``r^2`` is at most twice the stage's rounds (``calibrated_rounds``).
    On the paper's design with 100 clients (R = 5 in R^10, diagonal: 105 coordinates, early stages of 5
    rounds) ``r^2`` at 40 rounds is 9.5 at epsilon 2, 34.5 at epsilon 1 and 126 at epsilon 0.5 (from
    ``noise_multiplier`` and the noise for one client's rows replaced)."""
    family, sizes = GaussianFamily("diag"), np.full(100, 300)
    m = update_size(family, 10, 5)
    assert m == 5 * (1 + 10 + 10)
    auto = lambda epsilon, **options: calibrated_rounds(  # noqa: E731
        DifferentialPrivacy(epsilon, 1e-6, bounds=BOUNDS, **options), sizes, 5, m)
    assert auto(2.0) == auto(4.0) == 40
    assert auto(8.0, unit="sample") == auto(0.5, unit="sample") == 40      # one row's noise among all rows
    assert auto(0.5, rounds=12) == 12                                        # the user's rounds, as given
    for options in ({"epsilon": 1.0}, {"epsilon": 0.5}, {"epsilon": 4.0, "noise": "local"}):
        with pytest.warns(UserWarning, match="fewest rounds"):
            assert auto(**options) == 5
    # The rule reads public numbers only, and larger clients' sizes, capped at the median, change nothing.
    assert calibrated_rounds(DifferentialPrivacy(2.0, 1e-6, bounds=BOUNDS), np.r_[sizes[:99], 10 ** 6], 5, m) == 40


@QUIET
@pytest.mark.parametrize("method, noise, unit", [("fedem", "central", "client"), ("fedgrem", "central", "client"),
                                                 ("fedem", "local", "client"), ("fedgrem", "local", "client"),
                                                 ("fedem", "central", "sample"), ("fedem", "local", "sample")])
def test_a_private_fit_is_equivariant_to_units_given_bounds_in_the_same_units(method, noise, unit):
    """Everything runs in the units the bounds define: rescaled and shifted features with the bounds mapped
    the same way give the same fit, mapped back (the noise included, on the aggregate or on each client's
    update: it is drawn in those units; FedGrEM's clients' own components too, soft-thresholded in whitened
    units; the releases kept in the box)."""
    X, _ = make_federated_gmm(6, 80, random_state=1)
    rs = np.random.RandomState(0)
    a, b = rs.uniform(0.1, 10.0, 10), rs.uniform(-100.0, 100.0, 10)
    # Local noise at epsilon 4 on six clients swamps every update, and the rounds (a split's argmax among them)
    # then amplify the units' rounding into another fit: epsilon 1e3 keeps the local path's noise, clipping and
    # robust centre, with rounds that settle.
    # Each row private, the same at epsilon 4 (its noise is one row's, relative to 80 rows a client): 8 and 1e3.
    epsilon = {("central", "client"): 4.0, ("central", "sample"): 8.0}.get((noise, unit), 1e3)
    privacy = lambda bounds: DifferentialPrivacy(epsilon, 1e-6, bounds=bounds, rounds=30, noise=noise,  # noqa: E731
                                                 unit=unit)
    model = _fit(X, method=method, privacy=privacy((np.full(10, -7.0), np.full(10, 7.0))))
    moved = _fit([x * a + b for x in X], method=method, privacy=privacy((-7.0 * a + b, 7.0 * a + b)))
    np.testing.assert_allclose(moved.means_, model.means_ * a + b, rtol=1e-9, atol=1e-9 * np.abs(b).max())
    np.testing.assert_allclose(moved.weights_, model.weights_, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("method", ["fedem", "fedgrem"])
def test_without_noise_the_private_path_reaches_the_plain_fits_accuracy(method):
    """epsilon = 1e6 leaves a noise of about 1e-4 of the clip: what remains is the splitting start and the
    clipped rounds, which must reach the plain fit's fixed point on the paper's GMM design (20 clients of
    300 rows; largest error about 0.1 for both, 0.09 and 0.089 here for FedEM, 0.075 and 0.094 for FedGrEM,
    whose clients here all take the consensus). A component split wrongly or left short of its fixed point by
    the clip costs 0.5 to 2."""
    X, truth = make_federated_gmm(20, 300, random_state=0)
    plain = FederatedGaussianMixture(5, method=method, random_state=0).fit(X)
    model = _fit(X, method=method, privacy=DifferentialPrivacy(1e6, 1e-6, bounds=BOUNDS))
    error = [estimation_errors(m.weights_, m.means_, truth.weights, truth.theta)[1].max() for m in (plain, model)]
    assert abs(error[1] - error[0]) < 0.05


@pytest.mark.parametrize("covariance_type", ["identity", "spherical", "full"])
def test_every_covariance_type_starts_in_the_bounds_and_fits_without_noise(covariance_type):
    """The identity model fits in the data's own units (its variances are fixed there): its start must still sit
    at the bounds' centre, here far from 0; the others run in the box's standard units. Without noise each
    reaches the plain FedEM's fixed point (largest error near 0.1 on 20 clients of 300 rows, see above). Full
    covariances release 55 log-covariance coordinates per component against 10 for diagonal ones, so with the
    same clip their rounds move less each: they get 60 rounds (with 40, 2.03: a split goes wrong)."""
    X, truth = make_federated_gmm(20, 300, random_state=0)
    shift = 50.0
    X = [x + shift for x in X]
    rounds = 60 if covariance_type == "full" else 40
    model = _fit(X, covariance_type=covariance_type,
                 privacy=DifferentialPrivacy(1e6, 1e-6, bounds=(shift - 7, shift + 7), rounds=rounds))
    error = estimation_errors(model.weights_, model.means_ - shift, truth.weights, truth.theta)[1].max()
    assert error < 0.3


@pytest.mark.parametrize("options, match", [
    ({"method": "tgmm"}, "method='fedem' or 'fedgrem'"),
    ({"method": METHODS["fedgrem"](penalty="paper")}, "options \\['penalty'\\]"),
    ({"covariance_type": "tied"}, "covariance_type='tied'"),
    ({"n_init": 2}, "n_init=1"),
    ({"rounds": 2}, "rounds=...\\) >= n_components"),
    ({"privacy": DifferentialPrivacy()}, "bounds"),
    ({"privacy": DifferentialPrivacy(bounds=(0.0, [1.0, 2.0]))}, "shape"),
    ({"privacy": DifferentialPrivacy(bounds=(1.0, 0.0))}, "lower < upper"),
    ({"privacy": DifferentialPrivacy(epsilon=0.0, bounds=BOUNDS)}, "epsilon"),
    ({"privacy": DifferentialPrivacy(rounds=0, bounds=BOUNDS)}, "rounds"),
])
def test_what_a_private_fit_cannot_do_is_a_clear_error(options, match):
    X, _ = make_federated_gmm(4, 60, random_state=0)
    with pytest.raises(ValueError, match=match):
        _fit(X, **options)


def test_the_private_transport_refuses_every_query_outside_the_rounds():
    clients = PrivateClients(object(), None)
    for query in ("moments", "family_starts", "user_start", "fit_weights", "deal_folds", "held_out_loglik"):
        with pytest.raises(ValueError, match="outside the rounds"):
            getattr(clients, query)


@pytest.mark.parametrize("covariance_type", ["identity", "spherical", "diag", "full"])
def test_whitened_displacements_have_the_mahalanobis_norm_and_come_back(covariance_type):
    rs = np.random.RandomState(0)
    family, R, d = GaussianFamily(covariance_type), 3, 4
    if covariance_type == "full":
        A = rs.normal(size=(R, d, d))
        covariance = A @ np.swapaxes(A, 1, 2) + np.eye(d)
        scale = covariance.reshape(R, d * d)
    else:
        scale = rs.uniform(0.5, 2.0, (R, d if covariance_type == "diag" else 1))
        scale = np.ones_like(scale) if covariance_type == "identity" else scale
        covariance = np.stack([np.diag(np.broadcast_to(s, (d,))) for s in scale])
    delta = rs.normal(size=(R, d))
    z = family.whiten(delta, scale)
    np.testing.assert_allclose((z ** 2).sum(axis=1),
                               np.einsum("ri,rij,rj->r", delta, np.linalg.inv(covariance), delta), rtol=1e-10)
    np.testing.assert_allclose(family.unwhiten(z, scale), delta, rtol=1e-10, atol=1e-12)


def test_a_split_halves_the_widest_heaviest_component_along_its_widest_axis():
    family = GaussianFamily("diag")
    theta = np.array([[[0.0, 0.0], [5.0, 5.0]]])
    scale = np.array([[[1.0, 4.0], [1.0, 1.0]]])
    params = MixtureParams(np.array([[0.5, 0.5]]), theta, scale)
    split = split_component(family, params, np.array([0.5, 0.5]), 2, np.random.RandomState(0))
    np.testing.assert_allclose(split.theta[0], [[0.0, -1.0], [5.0, 5.0], [0.0, 1.0]])
    np.testing.assert_allclose(split.weights[0], [0.25, 0.5, 0.25])
    np.testing.assert_allclose(split.scale[0], [[1.0, 4.0], [1.0, 1.0], [1.0, 4.0]])


class _Echo:
    """Clients that reply with exactly the components they were sent: every update is zero."""

    def __init__(self, n, family):
        self.n_samples, self.n_clients, self.family, self.ledger = n, len(n), family, None

    def start(self, strategy, params):
        pass

    def step(self, strategy, broadcast, heard=None):
        p = broadcast.params
        K = self.n_clients
        return ClientMessage(self.n_samples, np.ones(K), p.weights, p.theta, p.scale, "stats"), np.arange(K)


def test_under_local_noise_each_client_noises_its_own_update_by_twice_the_clip():
    """A client's update may be any point of the ball of radius clip, so two of its data sets' updates lie up
    to 2 clip apart: its own noise must be sigma times that. Updates of zero: what a client sends is the noise
    alone; 60 rounds of 20 clients and 14 coordinates put the sample sd within 5% of 2 sigma clip with
    probability far above 0.9999. What the server gets carries no log-likelihood and no statistics."""
    K, R, d, sigma, clip = 20, 2, 3, 1.5, 0.5
    family = GaussianFamily("diag")
    rs = np.random.RandomState(0)
    params = MixtureParams(np.full((K, R), 1.0 / R), np.broadcast_to(rs.normal(size=(R, d)), (K, R, d)).copy(),
                           np.ones((K, R, d)))
    average = PrivateAverage(METHODS["fedem"](), family, d, clip, sigma, rs, noise="local")
    clients = PrivateClients(_Echo(np.full(K, 50.0), family), average)
    clients.start(average, params)
    noise = []
    for _ in range(60):
        messages, _ = clients.step(average, Broadcast(params))
        noise.append(encode(family, d, messages, shared_point(params)))
        assert np.all(messages.loglik == 0) and messages.stats is None
    noise = np.array(noise)
    assert abs(noise.std() / (2 * sigma * clip) - 1) < 0.05
    assert abs(noise.mean()) < 5 * 2 * sigma * clip / np.sqrt(noise.size)


@settings(max_examples=30, deadline=None)
@given(st.integers(3, 12), st.integers(1, 5), st.floats(0.05, 5.0), st.integers(0, 2 ** 31 - 1))
def test_the_robust_centre_solves_fedgrems_central_problem(K, m, clip, seed):
    """The optimality condition of the centre of FedGrEM's central problem at penalty ``clip``, weights ``s``:
    ``sum_k s_k clip(v_k - centre)`` = 0 (the Huber estimating equation), whatever the points."""
    rs = np.random.RandomState(seed)
    v = rs.standard_normal((K, m)) * rs.uniform(0.1, 10.0, (K, 1))
    share = rs.dirichlet(np.ones(K))
    centre = robust_centre(v, share, clip)
    residual = share @ clip_rows(v - centre, clip)
    assert np.linalg.norm(residual) < 1e-6 * clip


def test_one_party_cannot_move_the_robust_centre_by_more_than_its_pull():
    """Twenty noisy updates (sd 3 in 8 coordinates, as under local noise) and one party sending 1e12: the mean
    moves by 5e10, the robust centre by less than one noise sd of the mean (0.67 here; measured 0.13)."""
    rs = np.random.RandomState(0)
    v = 3.0 * rs.standard_normal((21, 8))
    share = np.full(21, 1 / 21)
    clean = robust_centre(v, share, 1.0)
    v[0] = 1e12
    assert np.linalg.norm(share @ v - clean) > 1e10
    assert np.linalg.norm(robust_centre(v, share, 1.0) - clean) < 3.0 / np.sqrt(21)


def test_a_client_keeps_its_own_components_only_beyond_the_noise():
    """FedGrEM's clients under privacy: one at the release takes it exactly, one displaced by z (whitened) keeps
    z shrunk by lambda = sqrt(q (1 / N + v)), with q the chi-square quantile at 1 - 0.05 / (K R) (here
    K R = 4 and p = 2 degrees of freedom: q = -2 log(0.0125))."""
    family = GaussianFamily("spherical")
    point = MixtureParams(np.full(2, 0.5), np.zeros((2, 2)), np.full((2, 1), 4.0))    # sd 2
    theta = np.zeros((2, 2, 2))
    theta[1, 0] = [20.0, 0.0]            # whitened: 10 along the first axis
    N = np.full((2, 2), 25.0)
    own = personal_components(family, theta, point, N, centre_variance=0.01, n_clients=2)
    lam = np.sqrt(-2 * np.log(0.05 / 4) * (1 / 25 + 0.01))
    np.testing.assert_allclose(own[0], 0.0)
    np.testing.assert_allclose(own[1, 1], 0.0)
    np.testing.assert_allclose(own[1, 0], [2.0 * (10.0 - lam), 0.0], rtol=1e-4)


def test_releases_stay_where_data_in_the_box_can_be():
    """Means clipped to the box, variances between 1e-6 of its half-width squared and the half-width squared
    (a full covariance's eigenvalues up to d times): post-processing that keeps a noisy round usable."""
    lower, upper = np.array([-1.0, -2.0]), np.array([1.0, 2.0])
    theta = np.array([[5.0, -5.0], [0.5, 0.5]])
    diag = GaussianFamily("diag")
    t, scale = in_the_box(diag, theta, np.array([[1e-12, 100.0], [0.5, 0.5]]), lower, upper)
    np.testing.assert_allclose(t, [[1.0, -2.0], [0.5, 0.5]])
    np.testing.assert_allclose(scale, [[1e-6, 4.0], [0.5, 0.5]])
    full = GaussianFamily("full")
    _, cov = in_the_box(full, theta, np.array([np.diag([100.0, 1e-12]).ravel(), np.eye(2).ravel()]), lower, upper)
    np.testing.assert_allclose(np.linalg.eigvalsh(cov[0].reshape(2, 2)), [1e-6, 8.0])
    np.testing.assert_allclose(cov[1], np.eye(2).ravel())


@QUIET
def test_under_noise_fedgrems_clients_fall_back_on_their_own_components():
    """Two groups of ten clients whose means differ by 1 in every coordinate (3.2 apart). At epsilon 8 the
    release of 20 clients is noisy (about 0.4 of a spread per coordinate and round); FedEM's clients must use
    it, FedGrEM's keep the part of their own estimate beyond the noise and the group's offset from the centre:
    mean error over clients 1.02 against FedEM's 3.68 (one seed). Without noise the two groups' means lie apart in FedGrEM's fit (0.65 per
    coordinate: each keeps its offset beyond the penalty) and coincide in FedEM's."""
    centers = np.random.RandomState(1).normal(scale=3.0, size=(3, 10))
    Xa, truth_a = make_federated_gmm(10, 300, centers=centers, random_state=2)
    Xb, truth_b = make_federated_gmm(10, 300, centers=centers + 1.0, random_state=3)
    truth = np.concatenate([np.broadcast_to(centers, (10, 3, 10)), np.broadcast_to(centers + 1.0, (10, 3, 10))])
    weights = np.concatenate([truth_a.weights, truth_b.weights])
    error = {}
    for method in ("fedem", "fedgrem"):
        fit = _fit(Xa + Xb, method=method, n_components=3, covariance_type="spherical",
                   privacy=DifferentialPrivacy(8.0, 1e-6, bounds=(-12.0, 15.0)))
        error[method] = estimation_errors(fit.weights_, fit.means_, weights, truth)[1].mean()
    assert error["fedgrem"] < 0.6 * error["fedem"]
    plain = _fit(Xa + Xb, method="fedgrem", n_components=3, covariance_type="spherical",
                 privacy=DifferentialPrivacy(1e6, 1e-6, bounds=(-12.0, 15.0)))
    gap = plain.means_[10:].mean(axis=0) - plain.means_[:10].mean(axis=0)
    assert np.all(np.abs(np.abs(gap) - 0.65) < 0.35)


# At the level of samples (unit="sample"): the clients' sums in the components' own units.

def _sums_setting(covariance_type, n=40, K=3, R=3, d=4, seed=0):
    from fedmm.data import FederatedData
    rs = np.random.RandomState(seed)
    family = GaussianFamily(covariance_type)
    data = FederatedData.from_input([rs.standard_normal((n, d)) * 2 + rs.uniform(-3, 3, d) for _ in range(K)])
    scale = {"identity": np.ones((K, R, 1)), "spherical": rs.uniform(0.5, 2.0, (K, R, 1)),
             "diag": rs.uniform(0.5, 2.0, (K, R, d))}.get(covariance_type)
    if scale is None:
        A = rs.standard_normal((K, R, d, d))
        scale = (A @ np.swapaxes(A, -1, -2) + d * np.eye(d)).reshape(K, R, d * d)
    params = MixtureParams(rs.dirichlet(np.ones(R), K), rs.standard_normal((K, R, d)) * 2, scale)
    return family, data, params


@settings(max_examples=30, deadline=None)
@given(covariance_type=st.sampled_from(["identity", "spherical", "diag", "full"]), seed=st.integers(0, 10_000),
       far=st.floats(0.0, 1e6))
def test_one_row_replaced_moves_the_sums_by_at_most_their_sensitivity(covariance_type, seed, far):
    """The sums with one row replaced by any other (``far`` sends it off), each field over its noise's standard
    deviation per unit of sigma (sums_noise), differ by at most 1 in Euclidean norm, whatever the rows and the
    components: the Gaussian mechanism's sensitivity the noise is calibrated for (row_sensitivity: the bound
    below the triangle inequality's 2 holds because two rows' squares have a non-negative inner product)."""
    from fedmm.data import FederatedData
    from fedmm.privacy import row_radius, sums_noise
    family, data, params = _sums_setting(covariance_type, K=1, seed=seed)
    radius = row_radius(4)
    X = data.X.copy()
    X[0] = np.random.RandomState(seed).standard_normal(4) * (1.0 + far)
    other = FederatedData.from_input([X])
    sd = sums_noise(family, radius)
    flat = lambda sums: np.concatenate([f.ravel() / v for f, v in zip(sums, sd)])  # noqa: E731
    change = np.linalg.norm(flat(family.whitened_sums(other, params, radius))
                            - flat(family.whitened_sums(data, params, radius)))
    assert change <= 1.0 + 1e-9


@pytest.mark.parametrize("covariance_type", ["identity", "spherical", "diag", "full"])
def test_the_whitened_m_step_is_ems_m_step_when_no_row_is_clipped(covariance_type):
    """Without noise and with no row clipped, the M-step of the pooled whitened sums about the sent components
    is EM's M-step of the pooled sums (the oracle, fedmm.families), whatever components they were taken about."""
    from fedmm.families import pool_stats
    from fedmm.privacy import whitened_m_step
    family, data, params = _sums_setting(covariance_type, K=3)
    shared = MixtureParams(params.weights, np.broadcast_to(params.theta[0], params.theta.shape),
                           np.broadcast_to(params.scale[0], params.scale.shape))
    sums = family.whitened_sums(data, shared, np.inf)
    weights, theta, scale = whitened_m_step(family, pool_stats(sums), shared_point(shared), np.zeros(3))
    stats = pool_stats(family.estep(data, shared)[1])
    expected_theta, expected_scale = family.m_step(stats)
    np.testing.assert_allclose(theta, expected_theta[0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(scale, expected_scale[0] - family.reg_covar * (covariance_type != "identity")
                               * (np.eye(4).ravel() if covariance_type == "full" else 1.0), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(weights, stats.N[0] / stats.N.sum(), rtol=1e-12)


@QUIET
@pytest.mark.parametrize("noise", ["central", "local"])
@pytest.mark.slow  # 5 s: in CI's slow steps (.ci/run), so that the default run stays under 5 minutes
def test_privacy_for_each_row_costs_far_less_than_for_each_client(noise):
    """The paper's GMM design, 100 clients of 300 rows, epsilon 4 (docs/privacy.md): the noise on the sums is one
    row's among 30,000 (the clients' own among them under local noise), where client-level privacy's is one
    client's among 100. Measured largest errors: sample level 0.066 central, 0.196 local; client level 0.15
    central, 12.7 local (components lost); without privacy 0.05. Bounds: 0.1 and 0.5 (a component off by
    its noise costs 0.3-1, a lost one 5-15), and below client level's."""
    X, truth = make_federated_gmm(100, 300, random_state=0)

    def error(unit):
        model = _fit(X, rounds=40, privacy=DifferentialPrivacy(4.0, 1e-6, bounds=BOUNDS, noise=noise, unit=unit))
        return estimation_errors(model.weights_, model.means_, truth.weights, truth.theta)[1].max()
    sample = error("sample")
    assert sample < (0.1 if noise == "central" else 0.5)
    assert sample < error("client")


@QUIET
@pytest.mark.filterwarnings("ignore::fedmm.privacy.OutsideBoundsWarning")   # two rows beyond 7: clipped alike
@pytest.mark.parametrize("method", ["fedem", "pooled-em"])
def test_a_sample_level_fit_is_equivariant_to_units_and_pooled_em_shares_its_proportions(method):
    """As at the level of clients (above): everything runs in the bounds' units, the deviations whitened in the
    components'. Only the sums go up; FedEM's clients keep their own proportions, pooled EM's take the release's."""
    X, _ = make_federated_gmm(20, 150, random_state=1)
    rs = np.random.RandomState(0)
    a, b = rs.uniform(0.1, 10.0, 10), rs.uniform(-100.0, 100.0, 10)
    privacy = lambda bounds: DifferentialPrivacy(4.0, 1e-6, bounds=bounds, rounds=30, unit="sample")  # noqa: E731
    model = _fit(X, method=method, privacy=privacy((np.full(10, -7.0), np.full(10, 7.0))))
    moved = _fit([x * a + b for x in X], method=method, privacy=privacy((-7.0 * a + b, 7.0 * a + b)))
    np.testing.assert_allclose(moved.means_, model.means_ * a + b, rtol=1e-9, atol=1e-9 * np.abs(b).max())
    np.testing.assert_allclose(moved.weights_, model.weights_, rtol=1e-9, atol=1e-12)
    shared = np.allclose(model.weights_, model.weights_[0])
    assert shared == (method == "pooled-em")
    sent = model.communication_
    assert set(sent["query"]) == {"units", "start", "sums"}


@pytest.mark.parametrize("method, unit", [("fedgrem", "sample"), ("pooled-em", "client")])
def test_each_unit_runs_its_methods_only(method, unit):
    X, _ = make_federated_gmm(4, 60, random_state=0)
    with pytest.raises(ValueError, match=f"unit='{unit}' runs method="):
        _fit(X, method=method, privacy=DifferentialPrivacy(bounds=BOUNDS, unit=unit))


def test_a_private_fedgrems_clients_take_their_m_step():
    """Under privacy FedGrEM's clients step with eta_rule="current" at C_eta = 1: the whole way to their
    M-step, the same update as FedEM's client from the same components (the rounds are few and fixed; measured
    on one outlier among 100 clients at epsilon 2, 4 seeds: 0.374-0.638 against the safeguarded steps'
    0.420-0.635 and FedEM's 0.374-0.772, docs/privacy.md)."""
    from fedmm.data import FederatedData
    from fedmm.protocol import ClientState
    X, _ = make_federated_gmm(3, 80, random_state=0)
    data = FederatedData.from_input(X)
    family = GaussianFamily("diag")
    rs = np.random.RandomState(0)
    params = MixtureParams(rs.dirichlet(np.ones(4), 3), rs.standard_normal((3, 4, 10)), rs.uniform(0.5, 2, (3, 4, 10)))
    fedgrem, fedem = METHODS["fedgrem"](eta_rule="current"), METHODS["fedem"]()
    # A start whose weights are far above this round's: the safeguarded step would stop short of the M-step.
    state = ClientState(params, np.ones((3, 4)))
    grem, _ = fedgrem.client_step(family, data, state, Broadcast(params))
    em, _ = fedem.client_step(family, data, state, Broadcast(params))
    # Where a component holds at least one row's worth (below, the step is floored at a row's).
    held = em.weights * em.n[:, None] >= 1
    assert held.sum() >= 9
    np.testing.assert_allclose(grem.theta[held], em.theta[held], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grem.scale[held], em.scale[held], rtol=1e-12)
    model = _fit(X, method="fedgrem", n_components=2)
    assert model.method_.eta_rule == "current"


@pytest.mark.parametrize("method", ["fedgrem", "fedem"])
def test_without_privacy_no_private_code_runs(method, monkeypatch):
    """privacy=None (the default) costs nothing: the fit never reaches fedmm.privacy (every part of it raises
    here), and it is the fit without the argument, bit for bit."""
    import fedmm.estimators._base as base
    X, _ = make_federated_gmm(5, 80, random_state=0)
    plain = FederatedGaussianMixture(3, method=method, random_state=0).fit(X)

    def forbidden(*args, **kwargs):
        raise AssertionError("a fit without privacy ran private code")
    for name in ("private_server", "PrivateClients", "run_stages", "noise_multiplier", "epsilon_spent",
                 "centre_start", "stage_rounds", "calibrated_rounds", "update_size"):
        monkeypatch.setattr(base, name, forbidden)
    model = FederatedGaussianMixture(3, method=method, random_state=0, privacy=None).fit(X)
    np.testing.assert_array_equal(model.means_, plain.means_)
    np.testing.assert_array_equal(model.weights_, plain.weights_)
    assert not hasattr(model, "privacy_spent_")


def test_one_partys_sums_count_for_at_most_what_its_trusted_size_allows():
    """Each row private, a party's sums and size are claims: sums of honest clients of equal sizes whose rows
    the components describe pass unchanged; sums no honest client adds up to are kept within sums_limits per
    row (plus six noise sds), and a size claim of 1e6 among clients of 100 counts as SIZE_CAP = 4 median
    clients."""
    from fedmm.data import FederatedData
    from fedmm.families.gaussian import WhitenedSums
    from fedmm.privacy import SUMS_RANGE, bounded_sums, row_radius
    family, _, params = _sums_setting("diag", n=50, K=3)
    rs = np.random.RandomState(1)
    data = FederatedData.from_input([params.theta[k, rs.choice(3, 200, p=params.weights[k])]
                                     + np.sqrt(params.scale[k, 0]) * rs.standard_normal((200, 4)) for k in range(3)])
    radius = row_radius(4)
    honest = family.whitened_sums(data, params, radius)
    for f, g in zip(bounded_sums(family, honest, data.n_samples, radius, np.zeros(3)), honest):
        np.testing.assert_array_equal(f, g)
    K, R, d = honest.Sz.shape
    liar = WhitenedSums(np.full((K, R), 1e12), np.full((K, R, d), -1e12), np.full((K, R, d), 1e12))
    n = np.array([100.0, 100.0, 1e6])
    kept = bounded_sums(family, liar, n, radius, np.array([1.0, 2.0, 3.0]))
    cap = np.array([100.0, 100.0, 400.0])
    np.testing.assert_allclose(kept.N, ((n + 6.0) * cap / n)[:, None] * np.ones(R))
    np.testing.assert_allclose(kept.Sz, (-(n * SUMS_RANGE[1] + 12.0) * cap / n)[:, None, None] * np.ones((R, d)))
    np.testing.assert_allclose(kept.Szz, ((n * SUMS_RANGE[2] + 18.0) * cap / n)[:, None, None] * np.ones((R, d)))


@QUIET
@pytest.mark.parametrize("noise", ["central", "local"])
def test_each_row_private_every_e_step_is_at_the_released_proportions(noise, monkeypatch):
    """Each row private, a client's own proportions, computed from its own sums, would carry one of its rows into
    every later round's sums (a sensitivity beyond one row's, found by an outside audit): every client's E-step
    runs at the released proportions, the same for every client, and its own proportions are only its fitted
    ones."""
    X, _ = make_federated_gmm(4, 80, random_state=1)
    family_sums, seen = GaussianFamily.whitened_sums, []

    def spy(self, data, params, radius):
        seen.append(params.weights.copy())
        return family_sums(self, data, params, radius)
    monkeypatch.setattr(GaussianFamily, "whitened_sums", spy)
    fit = _fit(X, privacy=DifferentialPrivacy(4.0, 1e-6, bounds=BOUNDS, rounds=10, noise=noise, unit="sample"))
    assert len(seen) == 10
    for weights in seen:
        np.testing.assert_array_equal(weights, np.broadcast_to(weights[0], weights.shape))
    assert not np.allclose(fit.weights_, fit.weights_[0])       # each client's fitted proportions its own


@pytest.mark.parametrize("noise", ["central", "local"])
def test_each_row_private_runs_with_identity_variances(noise):
    """Identity variances have no squares' sums: the noise and the server's limits skip them (they raised)."""
    X, _ = make_federated_gmm(4, 80, random_state=1)
    fit = _fit(X, covariance_type="identity", n_components=2,
               privacy=DifferentialPrivacy(4.0, 1e-6, bounds=BOUNDS, rounds=4, noise=noise, unit="sample"))
    assert np.all(np.isfinite(fit.means_))


# What a private fit reports: rows outside the bounds, what it cannot compute, what verbose prints.


@QUIET
def test_rows_outside_the_bounds_are_clipped_with_a_warning_naming_the_clients_that_hold_them():
    X, _ = make_federated_gmm(4, 80, random_state=1)
    X = [x.copy() for x in X]
    X[2][:3, 0] = 20.0                      # three rows of client 2 beyond the upper bound
    with pytest.warns(OutsideBoundsWarning, match=r"3 row\(s\) .*client 2: 3 of 80 rows") as caught:
        fit = _fit(X, n_components=2, rounds=4)
    assert "client 0" not in str(caught[0].message) and "nothing released" in str(caught[0].message)
    # The fit is that of the clipped rows: the same as a fit given them clipped.
    clipped = [np.clip(x, *BOUNDS) for x in X]
    np.testing.assert_allclose(fit.means_, _fit(clipped, n_components=2, rounds=4).means_)
    # Rows inside: no warning, nothing changed.
    with warnings.catch_warnings():
        warnings.simplefilter("error", OutsideBoundsWarning)
        _fit(clipped, n_components=2, rounds=4)


def test_clip_to_bounds_clips_each_feature_and_marks_the_rows_outside():
    X = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, -3.0]])
    clipped, outside = clip_to_bounds(X, np.array([-1.0, -2.0]), np.array([1.0, 2.0]))
    np.testing.assert_array_equal(clipped, [[0, 0], [1, 0], [0, -2]])
    np.testing.assert_array_equal(outside, [False, True, True])
    np.testing.assert_array_equal(clip_to_bounds(X[:1], -1.0, 1.0)[0], X[:1])


def test_a_flower_client_clips_its_own_rows_and_warns_there():
    """Across parties the client clips on its own machine (the server's hello brings the bounds)."""
    pytest.importorskip("flwr")
    from types import SimpleNamespace

    from flwr.app import ConfigRecord

    from fedmm.flower.client import _read
    X = np.array([[0.0, 0.5], [9.0, 0.0], [0.1, 0.2]])
    context = SimpleNamespace(state={"fedmm.bounds": ConfigRecord({"bounds": "[-1.0, [1.0, 2.0]]"})},
                              node_config={"partition-id": 7})
    with pytest.warns(OutsideBoundsWarning, match=r"client 7: 1 of 3 rows"):
        data = _read(lambda c: (X, None), context, FederatedGaussianMixture())
    np.testing.assert_array_equal(data.X, [[0.0, 0.5], [1.0, 0.0], [0.1, 0.2]])
    context.state.clear()   # not a private fit: the rows as they are
    np.testing.assert_array_equal(_read(lambda c: (X, None), context, FederatedGaussianMixture()).X, X)


@QUIET
def test_verbose_prints_the_stages_the_rounds_and_the_privacy_spent_and_no_likelihood(capsys):
    X, _ = make_federated_gmm(4, 80, random_state=1)
    fit = _fit(X, n_components=2, rounds=4, verbose=1)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("private stage 1 of 2 (1 component):") and out[1].startswith("private stage 2 of 2")
    assert sum(int(line.split(": ")[1].split()[0]) for line in out[:2]) == fit.n_iter_ == 4
    seconds = [float(line.split("(")[-1].split(" s)")[0]) for line in out[:2]]
    assert all(0 <= s < 60 for s in seconds)            # the stage's own time, not the process's
    assert "4 rounds" in out[2] and "converged_ is False" in out[2] and "epsilon 4" in out[2]
    assert "likelihood per sample" not in "\n".join(out)
    assert not fit.converged_ and not hasattr(fit, "lower_bound_")
    # Nothing NaN among the fitted attributes.
    for name, value in vars(fit).items():
        if name.endswith("_") and isinstance(value, np.ndarray) and value.dtype.kind == "f":
            assert not np.isnan(value).any(), name
    for name, value in fit.history_.items():
        assert not np.isnan(np.asarray(value, dtype=float)).any(), name


@QUIET
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_plain_refit_after_a_private_one_reports_likelihoods_again_and_a_private_refit_drops_them():
    X, _ = make_federated_gmm(4, 80, random_state=1)
    model = FederatedGaussianMixture(2, method="fedem", random_state=0, max_iter=20)
    assert np.isfinite(model.fit(X).lower_bound_)
    model.set_params(privacy=DifferentialPrivacy(4.0, 1e-6, bounds=BOUNDS, rounds=4)).fit(X)
    assert not hasattr(model, "lower_bound_") and not hasattr(model, "log_likelihood_")
    assert np.isfinite(model.set_params(privacy=None).fit(X).lower_bound_)
