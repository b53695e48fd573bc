"""FedeRiCo and the dynamic-graph method (issue 14), and the clustered design every personalized method is
judged on: three groups of clients with their own component means, plus one outlier client."""

import warnings

import numpy as np
import pytest
from scipy.special import softmax

from fedmm import FederatedGaussianMixture
from fedmm.methods import METHODS
from fedmm.algorithms.dynamic import scaled_distances
from fedmm.algorithms.federico import (FedeRiCo, FedeRiCoDiagnostics, collaborator_weights, epsilon_greedy,
                                       update_losses)
from fedmm.data import FederatedData
from fedmm.engine import run_rounds
from fedmm.families import GaussianFamily, MixtureParams
from fedmm.metrics import estimation_errors
from fedmm.protocol import ClientMessage
from fedmm.simulate import make_federated_gmm, make_grouped_gmm

CENTERS = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])
K, R, P = 5, 3, 2


# --- FedeRiCo --------------------------------------------------------------------------

def test_accumulated_losses_give_the_softmax_of_their_sum():
    """App. A, eqs. (22)-(24): under a uniform prior the posterior is the softmax of minus the summed losses."""
    rounds = [np.array([[1.0, 2.0, 0.5], [3.0, 1.0, 2.0]]), np.array([[0.2, 0.1, 3.0], [1.0, 1.0, 0.0]])]
    L = np.zeros((2, 3))
    for ell in rounds:
        L = update_losses(L, ell, None)
    np.testing.assert_allclose(collaborator_weights(L), softmax(-(rounds[0] + rounds[1]), axis=1))
    # By hand for the first row: exp(-1.2), exp(-2.1), exp(-3.5), normalized.
    e = np.exp([-1.2, -2.1, -3.5])
    np.testing.assert_allclose(collaborator_weights(L)[0], e / e.sum())


def test_beta_one_keeps_only_the_latest_losses_and_beta_averages():
    L = np.array([[5.0, 1.0]])
    ell = np.array([[2.0, 4.0]])
    np.testing.assert_array_equal(update_losses(L, ell, 1.0), ell)
    np.testing.assert_allclose(update_losses(L, ell, 0.6), 0.4 * L + 0.6 * ell)


def test_epsilon_greedy_is_greedy_at_zero_and_uniform_at_one():
    rng = np.random.RandomState(0)
    w = np.array([0.05, 0.5, 0.1, 0.3, 0.05])
    np.testing.assert_array_equal(epsilon_greedy(w, 1, 2, 0.0, rng), [3, 2])     # never itself
    counts = np.zeros(5)
    for _ in range(3000):
        counts[epsilon_greedy(w, 1, 1, 1.0, rng)] += 1
    assert counts[1] == 0
    np.testing.assert_allclose(counts[[0, 2, 3, 4]] / 3000, 0.25, atol=4 * np.sqrt(0.25 * 0.75 / 3000))


def _problem():
    X, _ = make_federated_gmm(K, [40, 90, 60, 120, 70], centers=CENTERS, h=0.5, random_state=0)
    start = MixtureParams(np.full((K, R), 1 / R), CENTERS + 0.4 * np.random.RandomState(1).randn(K, R, P),
                          np.ones((K, R, P)))
    return FederatedData.from_input(X), GaussianFamily("diag"), start


@pytest.mark.parametrize("loss, beta", [("mean", None), ("mean", 1.0), ("evidence", None), ("evidence", 1.0)])
def test_the_fit_follows_the_closed_form_of_its_losses(loss, beta):
    """With every other client sampled every round, the weights after T rounds are the softmax of minus the
    accumulated losses of the models each round held (beta=None), or of the last round's alone (beta=1):
    losses computed here by hand from the models, one client and one model at a time. Under
    ``loss="evidence"`` a model's loss on client i's rows is its summed negative log-likelihood plus ``P`` times
    the share of its fit drawn from client i (``w_ij n_i`` over the model's total ``N``; each its own at the
    start), times AICc's ``N / (N - P - 1)``, over twice the noise ``sqrt(2 P)``."""
    data, family, start = _problem()
    T, n, P = 3, data.n_samples, family.n_parameters(R, data.n_features)
    strategy = lambda: METHODS["federico"](n_neighbors=K - 1, beta=beta, loss=loss)  # noqa: E731
    fits = [run_rounds(strategy(), family, data, start, t, 0.0) for t in range(1, T)]
    models = [start] + [f.params for f in fits]
    weight = [np.diag(n).astype(float)] + [f.diagnostics.w * n[:, None] for f in fits]    # w_ij n_i
    size = [w.sum(axis=0) for w in weight]
    optimism = [P * w / N * np.maximum(N, P + 2) / (np.maximum(N, P + 2) - P - 1) for w, N in zip(weight, size)]
    loglik = [np.array([[family.estep(data.client_data(i), m.take([j]))[0][0] for j in range(K)]
                        for i in range(K)]) for m in models]
    ell = [-ll / n[:, None] if loss == "mean" else (-ll + o) / (2 * np.sqrt(2 * P)) for ll, o in zip(loglik, optimism)]
    expected = softmax(-(sum(ell) if beta is None else ell[-1]), axis=1)
    fit = run_rounds(strategy(), family, data, start, T, 0.0)
    np.testing.assert_allclose(fit.diagnostics.w, expected, rtol=1e-10)


def test_a_federico_client_reports_its_own_proportions():
    """A model used by several clients carries proportions fitted on all their rows; each client reports its own,
    refitted on its rows at its model's components: its proportions are EM's fixed point there (the mean of its
    posteriors, to the refit's tolerance), which the model's shared ones, under label skew, are not."""
    X, _ = make_federated_gmm(8, 150, centers=3.0 * CENTERS, concentration=0.5, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fr = FederatedGaussianMixture(3, method="federico", covariance_type="spherical", random_state=0).fit(X)
    assert (fr.used_models_ != np.arange(8)).any()
    posterior_means = np.array([p.mean(axis=0) for p in fr.predict_proba(X)])
    np.testing.assert_allclose(fr.weights_, posterior_means, atol=0.01)


@pytest.mark.parametrize("seed", [0, 1])
def test_federico_counts_a_group_once_however_many_of_its_models_its_clients_weigh(seed):
    """Two groups of six (10 features, spread 6): a group's clients spread their weight over its models, fitted on
    the same rows; its models tied within a factor e count as one centre (they gave three or four)."""
    X, _, _ = make_grouped_gmm(n_groups=2, clients_per_group=6, n_samples=100, n_features=10, spread=6.0,
                               outlier=False, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fr = FederatedGaussianMixture(3, covariance_type="diag", method="federico", max_iter=100,
                                      random_state=seed).fit(X)
    assert fr.centers_.shape == (2, 3, 10)


def test_a_new_federico_client_joins_the_model_that_fits_its_rows():
    """personalize: a new client of a minority group (9 + 3 clients, every component 4 apart) takes the model its
    group's clients rely on, not the majority's (it took the clients' median, the majority's: 3.97 against
    0.2-0.66 for EM on its own rows, issue 61)."""
    base = 3.0 * np.array([[1.0, 0, 0, 0, 0], [-0.5, 0.866, 0, 0, 0], [-0.5, -0.866, 0, 0, 0]])
    shift = np.random.RandomState(1).randn(3, 5)
    minority = base + 4.0 * shift / np.linalg.norm(shift, axis=1, keepdims=True)
    X = make_federated_gmm(10, 100, centers=base, random_state=0)[0] + make_federated_gmm(
        4, 100, centers=minority, random_state=1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fr = FederatedGaussianMixture(3, covariance_type="spherical", method="federico", random_state=0).fit(
            X[:9] + X[10:13])
    for x, truth, other in ((X[9], base, minority), (X[13], minority, base)):
        theta = fr.personalize(x).params_.theta[0]
        same = np.full((1, 3), 1 / 3)
        error = {name: estimation_errors(same, theta[None], same, c[None])[1][0]
                 for name, c in (("own", truth), ("other", other))}
        assert error["own"] < 0.5 < 2.0 < error["other"]


def test_federico_counts_its_exchanges():
    X, _ = make_federated_gmm(K, 60, centers=CENTERS, h=0.3, random_state=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm = FederatedGaussianMixture(R, method=METHODS["federico"](n_neighbors=2), max_iter=5, tol=0.0,
                                      random_state=0).fit(X)
    # Round 1 is all-to-all: K (K - 1) pairs; later rounds K M pairs, one message each way per pair.
    assert gm.history_["messages"].tolist() == [2 * K * (K - 1)] + [2 * K * 2] * 4
    assert gm.collaborator_weights_.shape == (K, K)
    np.testing.assert_allclose(gm.collaborator_weights_.sum(axis=1), 1.0)


@pytest.mark.filterwarnings("ignore:method=.* did not converge")
def test_more_neighbours_than_a_client_has_draw_a_warning():
    """n_neighbors is a most, as scikit-learn's LocalOutlierFactor's: on 4 clients, 100 say so and each client
    evaluates its 3 neighbours (before: accepted without a word)."""
    X, _ = make_federated_gmm(4, 40, centers=CENTERS, random_state=0)
    with pytest.warns(UserWarning, match=r"n_neighbors=100\): 4 clients have 3 neighbours each.*n_neighbors to 3"):
        gm = FederatedGaussianMixture(R, method=METHODS["federico"](n_neighbors=100), max_iter=2, tol=0.0,
                                      random_state=0).fit(X)
    assert gm.history_["messages"].tolist() == [2 * 4 * 3] * 2


# --- the dynamic graph -----------------------------------------------------------------

def test_dynamic_graph_update_one_by_hand():
    """x_i <- x_tilde_i - eta rho sum_k w_ik (x_i - x_k), w_ik = 1{d_ik^2 < alpha_t}: two close clients pull
    each other, a far one is left alone."""
    strategy = METHODS["dynamic-graph"](C_eta=0.5, coupling=0.2, threshold0=50.0, threshold_min=1.0)
    x = np.zeros((3, 1, 2))
    x[1] = 0.1
    x[2] = 10.0
    family = GaussianFamily("identity")
    start = MixtureParams(np.ones((3, 1)), x, np.ones((3, 1, 1)))
    _, state = strategy.server_start(family, start, np.full(3, 100))
    tilde = x + np.array([1.0, 2.0, 3.0])[:, None, None]
    message = ClientMessage(np.full(3, 100), np.zeros(3), np.ones((3, 1)), tilde, np.ones((3, 1, 1)))
    broadcast, state = strategy.server_step(message, state, 1)
    # d^2 between clients 0 and 1: 2 * 0.01 / (2 / 100) = 1 < 50 / 1; to client 2: about 1e4.
    np.testing.assert_array_equal(state.graph, [[0, 1, 0], [1, 0, 0], [0, 0, 0]])
    expected = tilde.copy()
    expected[0] -= 0.5 * 0.2 * (x[0] - x[1])
    expected[1] -= 0.5 * 0.2 * (x[1] - x[0])
    np.testing.assert_allclose(broadcast.params.theta, expected)
    np.testing.assert_allclose(scaled_distances(x, np.ones((1, 1)), np.full((3, 1), 100.0))[0, 1], 1.0)


def test_without_coupling_it_is_local_gradient_em():
    X, _ = make_federated_gmm(K, 80, centers=CENTERS, h=0.5, random_state=2)
    kw = dict(covariance_type="diag", init="local-em", random_state=0, max_iter=50, tol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dyn = FederatedGaussianMixture(R, method=METHODS["dynamic-graph"](coupling=1e-300), **kw).fit(X)
        loc = FederatedGaussianMixture(R, method="local-grem", **kw).fit(X)
    np.testing.assert_allclose(dyn.means_, loc.means_, atol=1e-10)


# --- the clustered design ---------------------------------------------------------------

SEEDS = range(4)
CLUSTERED = {"local-em": {}, "fedem": {}, "federico": {}, "dynamic-graph": {}, "d-fedgrem": {"graph": "ring"}}


@pytest.fixture(scope="module")
def clustered():
    """Per seed: groups, and each method's fit and per-group mean parameter error (spread 6: components of a
    group at about 6 sqrt(2) apart, clients of 60 samples in R^5)."""
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in SEEDS:
            X, truth, groups = make_grouped_gmm(spread=6.0, random_state=seed)
            fits = {m: FederatedGaussianMixture(3, method=METHODS[m](**o), covariance_type="spherical",
                                                random_state=seed).fit(X) for m, o in CLUSTERED.items()}
            errors = {m: np.array([estimation_errors(f.weights_, f.means_, truth.weights, truth.theta)[1]
                                   [groups == g].mean() for g in range(3)]) for m, f in fits.items()}
            out.append((groups, fits, errors))
    return out


def test_federico_puts_its_weight_on_its_own_group(clustered):
    """Groups' means are many noise units apart: a client's likelihood under another group's model is lower by
    far more than the softmax can blur (per sample, |mu_a - mu_b|^2 / 2 is of order spread^2)."""
    for groups, fits, _ in clustered:
        W = fits["federico"].collaborator_weights_
        for k in np.flatnonzero(groups >= 0):
            assert W[k, groups == groups[k]].sum() > 0.9
        assert W[-1, -1] > 0.9                                   # the outlier works alone


def test_the_dynamic_graph_never_links_different_groups(clustered):
    for groups, fits, _ in clustered:
        G = fits["dynamic-graph"].collaboration_graph_
        same = (groups[:, None] == groups[None]) & (groups[:, None] >= 0)
        assert not (G & ~same).any()


@pytest.mark.parametrize("method", ["federico", "dynamic-graph", "d-fedgrem"])
def test_personalized_methods_beat_local_em_on_every_group(clustered, method):
    """Four clients a group: pooling a group would divide the variance by 4 (error ratio 1/2); the margin asks
    for 0.85 in the median over seeds (a single local optimum may still trap one client in one seed)."""
    ratios = np.array([e[method] / e["local-em"] for _, _, e in clustered])     # (seeds, groups)
    assert (np.median(ratios, axis=0) < 0.85).all(), ratios


def test_fedem_is_worse_than_local_em_on_every_group(clustered):
    """One set of components for three groups whose means differ by about 6 sqrt(2) cannot fit any group."""
    ratios = np.array([e["fedem"] / e["local-em"] for _, _, e in clustered])
    assert (ratios > 1.0).all(), ratios


@pytest.mark.parametrize("seed", [0, 8])
def test_a_federico_client_reports_the_model_it_relies_on(seed):
    """Two groups of five clients (spread 4): in these seeds one client's own model is stuck in a poor optimum
    (error 12.5 and 10.8 against local EM's 0.51 and 0.58) while the client puts 0.07 and 0.02 of its weight
    on it. It reports and predicts with a collaborator's model of its group, within 1.5x of its local EM error;
    ``used_models_`` says whose."""
    X, truth, groups = make_grouped_gmm(n_groups=2, clients_per_group=5, spread=4.0, outlier=False,
                                        random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fr = FederatedGaussianMixture(3, method="federico", covariance_type="spherical", random_state=seed).fit(X)
        local = FederatedGaussianMixture(3, method="local-em", covariance_type="spherical", random_state=seed).fit(X)
    err = estimation_errors(fr.weights_, fr.means_, truth.weights, truth.theta)[1]
    local_err = estimation_errors(local.weights_, local.means_, truth.weights, truth.theta)[1]
    w = fr.collaborator_weights_
    dropped = np.diag(w) < w.max(axis=1) / np.e                          # its own model all but dropped
    assert dropped.any()                                                 # the case the test is about
    assert (err[dropped] <= 1.5 * local_err[dropped]).all()
    assert (fr.used_models_[dropped] != np.flatnonzero(dropped)).all()
    assert (groups[fr.used_models_] == groups).all()                    # a collaborator of its own group


def test_a_federico_client_without_evidence_takes_the_model_its_group_fits_best():
    """``used_models``: a client that weighs models within a factor ``e`` of each other cannot tell them apart;
    among them it takes the one whose summed log weights over its group (minus the group's summed losses, up to
    a constant per client) are largest, where they exceed its own choice's by more than ``sqrt(m)`` for ``m``
    clients. A client with evidence keeps the model it weighs most, and groups stay apart."""
    w = np.array([[0.40, 0.35, 0.25, 0.00, 0.00],     # group {0, 1, 2}: model 1 is tied for all, model 0 only
                  [0.30, 0.40, 0.30, 0.00, 0.00],     # for clients 0 and 1; summed logs: model 1's exceed model
                  [0.05, 0.60, 0.35, 0.00, 0.00],     # 0's by 2.64 > sqrt(3)
                  [0.00, 0.00, 0.00, 0.95, 0.05],     # group {3, 4}: client 3 has evidence for its own model
                  [0.00, 0.00, 0.00, 0.45, 0.55]])    # client 4 cannot tell 3 from 4: the group's rows pick 3
    used = FedeRiCo().used_models(FedeRiCoDiagnostics(w, np.zeros((5, 2, 1))))
    np.testing.assert_array_equal(used, [1, 1, 1, 3, 3])
    weak = np.array([[0.45, 0.55],                    # the group favours model 0 by 0.65 < sqrt(2): no evidence,
                     [0.70, 0.30]])                   # client 0 keeps model 1
    np.testing.assert_array_equal(FedeRiCo().used_models(FedeRiCoDiagnostics(weak, np.zeros((2, 2, 1)))), [1, 0])
    uniform = np.full((4, 4), 0.25)                   # no evidence anywhere, every score equal: each keeps its own
    np.testing.assert_array_equal(FedeRiCo().used_models(FedeRiCoDiagnostics(uniform, np.zeros((4, 2, 1)))),
                                  np.arange(4))


def test_federico_settles_where_the_shares_in_its_loss_made_a_cycle():
    """Three clients, one an outlier: with each model's shares taken from the last round alone, a client paid for
    its share in the model it used, left it the next round and came back, a cycle of two rounds to ``max_iter``
    (500 rounds, the honest clients' error 3.25); the shares' moving average settles it."""
    X, truth = make_federated_gmm(3, 120, outlier_clients=[2], random_state=2)
    fit = FederatedGaussianMixture(5, method="federico", random_state=2).fit(X)
    assert fit.converged_ and fit.n_iter_ < 50
    assert estimation_errors(fit.weights_[:2], fit.means_[:2], truth.weights[:2], truth.theta[:2])[1].mean() < 1.0
