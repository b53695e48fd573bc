"""Differential privacy (fedmm.privacy): the accounting, the noise, the clipping, and the private fit."""

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
from fedmm.privacy import (DifferentialPrivacy, PrivateAverage, PrivateClients, clip_rows, epsilon_spent,  # noqa: E402
                           noise_multiplier, split_component)
from fedmm.protocol import ClientMessage  # noqa: E402
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
    average._sent = params
    return average, messages, params


def test_the_noise_on_the_aggregate_has_the_calibrated_standard_deviation():
    """Updates of zero (unit variances: the means' own units are the standard ones): what is released is the
    sent components plus the noise alone, whose standard deviation must be sigma times the aggregate's
    sensitivity, clip times the largest share n_k / n, sizes capped at the median one (one client of 10,000
    rows among sizes 10 to 190 must not set it). 400 rounds of 14 coordinates: the sample sd is within 5% of it
    with probability far above 0.9999 (its relative sd is 1 / sqrt(2 * 5600) < 1%)."""
    n = np.append(np.arange(1.0, 20.0) * 10, 10_000.0)
    average, messages, params = _aggregate(n=n, sigma=1.5, clip=0.5)
    server = METHODS["fedem"]().server_start(average.family, params, n)[1]
    for t in range(1, 401):
        average.server_step(messages, server, t)
    noise = np.array([np.concatenate([w - 0.5, (theta - params.theta[0]).ravel(), log_scale.ravel()])
                      for w, theta, log_scale in average.released])  # log(1) = 0
    capped = np.minimum(n, np.median(n))
    expected = 1.5 * 0.5 * capped.max() / capped.sum()
    assert abs(noise.std() / expected - 1) < 0.05
    assert abs(noise.mean()) < 5 * expected / np.sqrt(noise.size)
    assert average.releases == 400


def _fit(X, bounds=BOUNDS, rounds=30, **options):
    options = {"method": "fedem", "random_state": 0,
               "privacy": DifferentialPrivacy(4.0, 1e-6, bounds=bounds, rounds=rounds), **options}
    return FederatedGaussianMixture(5, **options).fit(X)


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
    assert np.all(np.isnan(model.log_likelihood_)) and np.isnan(model.lower_bound_)
    # The shared components are the same on every client; the proportions are each client's own.
    np.testing.assert_array_equal(model.means_, np.broadcast_to(model.means_[0], model.means_.shape))
    np.testing.assert_allclose(model.weights_.sum(axis=1), 1.0)


@QUIET
def test_a_private_fit_is_equivariant_to_units_given_bounds_in_the_same_units():
    """Everything runs in the units the bounds define: rescaled and shifted features with the bounds mapped
    the same way give the same fit, mapped back (the noise included: it is drawn in those units)."""
    X, _ = make_federated_gmm(6, 80, random_state=1)
    rs = np.random.RandomState(0)
    a, b = rs.uniform(0.1, 10.0, 10), rs.uniform(-100.0, 100.0, 10)
    model = _fit(X, bounds=(np.full(10, -7.0), np.full(10, 7.0)))
    moved = _fit([x * a + b for x in X], bounds=(-7.0 * a + b, 7.0 * a + b))
    np.testing.assert_allclose(moved.means_, model.means_ * a + b, rtol=1e-9, atol=1e-9 * np.abs(b).max())
    np.testing.assert_allclose(moved.weights_, model.weights_, rtol=1e-9, atol=1e-12)


def test_without_noise_the_private_path_reaches_the_plain_fits_accuracy():
    """epsilon = 1e6 leaves a noise of about 1e-4 of the clip: what remains is the splitting start and the
    clipped rounds, which must reach the plain FedEM's fixed point on the paper's GMM design (20 clients of
    300 rows; largest error about 0.1 for both, 0.09 and 0.089 here). A component split wrongly or left
    short of its fixed point by the clip costs 0.5 to 2."""
    X, truth = make_federated_gmm(20, 300, random_state=0)
    plain = FederatedGaussianMixture(5, method="fedem", random_state=0).fit(X)
    model = _fit(X, privacy=DifferentialPrivacy(1e6, 1e-6, bounds=BOUNDS))
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
    ({"method": "fedgrem"}, "method='fedem'"),
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
