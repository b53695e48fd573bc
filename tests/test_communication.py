"""Communication accounting in ``history_`` and partial participation (issue 14, items 2 and 3)."""

import numpy as np
import pytest

from fedmm import FederatedGaussianMixture
from fedmm.methods import METHODS
from fedmm.data import FederatedData
from fedmm.engine import run, run_rounds
from fedmm.protocol import Participation
from fedmm.families import GaussianFamily, MixtureParams
from fedmm.simulate import make_federated_gmm

K, R, P = 6, 3, 2
CENTERS = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])


def _problem():
    X, _ = make_federated_gmm(K, [40, 90, 60, 120, 70, 50], centers=CENTERS, h=0.3, random_state=0)
    start = MixtureParams(np.full((K, R), 1 / R), np.broadcast_to(CENTERS + 0.5, (K, R, P)).copy(),
                          np.ones((K, R, P)))
    return FederatedData.from_input(X), GaussianFamily("diag"), start


def _gmm(method, method_options=None, **options):
    """The design's data and an unfitted mixture of ``method`` (a name) with its own ``method_options``."""
    X, _ = make_federated_gmm(K, 80, centers=CENTERS, h=0.3, random_state=1)
    method = METHODS[method](**(method_options or {}))
    return X, FederatedGaussianMixture(R, method=method, covariance_type="diag", random_state=0, **options)


@pytest.mark.parametrize("method", ["fedem", "fedgrem", "pooled-em"])
def test_client_server_rounds_count_one_message_each_way_per_client(method):
    """Up: n_k, the log-likelihood, R weights, R p means, R p variances and, where sent, the statistics
    (N_r and R p first and second moments each); down: R weights, R p means, R p variances."""
    X, gm = _gmm(method=method)
    gm.fit(X)
    stats = R + 2 * R * P if method != "fedem" else 0
    per_client = (2 + R + 2 * R * P + stats) + (R + 2 * R * P)
    assert (gm.history_["messages"] == 2 * K).all()
    assert (gm.history_["floats"] == K * per_client).all()


@pytest.mark.parametrize("method", ["local-em", "local-grem", "tgmm"])
def test_methods_without_a_server_in_their_rounds_send_nothing(method):
    X, gm = _gmm(method=method)
    gm.fit(X)
    assert (gm.history_["messages"] == 0).all() and (gm.history_["floats"] == 0).all()


@pytest.mark.parametrize("n_gossip", [1, 3])
def test_gossip_sends_along_every_directed_edge_each_exchange(n_gossip):
    """A ring of K clients has 2K directed edges; each message is (n theta, n scale, n): 2 R p + 1 numbers."""
    X, gm = _gmm("d-fedem", dict(graph="ring", n_gossip=n_gossip))
    gm.fit(X)
    assert (gm.history_["messages"] == n_gossip * 2 * K).all()
    assert (gm.history_["floats"] == n_gossip * 2 * K * (2 * R * P + 1)).all()


def test_participation_hears_the_asked_fraction_after_a_first_round_with_everyone():
    draw = Participation(0.5, 0.0, random_state=0)
    assert draw(1, 10) is None
    masks = np.array([draw(t, 10) for t in range(2, 200)])
    assert (masks.sum(axis=1) == 5).all()
    # Uniform sampling: every client asked about half the time (binomial sd 0.036 over 198 rounds).
    np.testing.assert_allclose(masks.mean(axis=0), 0.5, atol=4 * 0.036)


def test_dropout_removes_that_share_of_the_asked():
    draw = Participation(0.5, 0.3, random_state=0)
    heard = np.array([draw(t, 20).sum() for t in range(2, 2002)])
    # 10 asked, each replying with probability 0.7: mean 7, sd of the mean of 2000 rounds 0.032.
    assert abs(heard.mean() - 7.0) < 4 * np.sqrt(10 * 0.7 * 0.3 / 2000)


def test_a_client_not_heard_keeps_what_it_had_and_the_server_reuses_its_last_message():
    """After a full first round, rounds that hear nobody change nothing: the server's reply to the same
    messages is the same, and every client keeps its parameters."""
    data, family, start = _problem()
    nobody = lambda t, n: None if t == 1 else np.zeros(n, dtype=bool)  # noqa: E731
    first = run_rounds(METHODS["fedem"](), family, data, start, 1, 0.0)
    silent = run_rounds(METHODS["fedem"](), family, data, start, 20, 0.0, participation=nobody)
    for a, b in zip(silent.params, first.params):
        np.testing.assert_array_equal(a, b)
    assert silent.history["messages"].tolist() == [2 * K] + [0] * 19


def test_only_the_heard_clients_update_their_proportions():
    data, family, start = _problem()
    one = lambda t, n: None if t == 1 else np.arange(n) == 2  # noqa: E731
    first = run_rounds(METHODS["fedem"](), family, data, start, 1, 0.0)
    later = run_rounds(METHODS["fedem"](), family, data, start, 5, 0.0, participation=one)
    others = np.arange(K) != 2
    np.testing.assert_array_equal(later.params.weights[others], first.params.weights[others])
    assert not np.allclose(later.params.weights[2], first.params.weights[2])
    # The shared components reach every client, heard or not.
    np.testing.assert_array_equal(later.params.theta, np.broadcast_to(later.params.theta[0], later.params.theta.shape))


@pytest.mark.parametrize("method", ["fedem", "fedgrem", "pooled-em"])
def test_partial_participation_reaches_the_full_participation_fit(method):
    """With the last messages reused, the fixed points are those of full participation."""
    X, full = _gmm(method=method, tol=1e-10, max_iter=2000)
    _, part = _gmm(method, dict(participation=0.5, dropout=0.2), tol=1e-10, max_iter=2000)
    full.fit(X)
    part.fit(X)
    assert part.converged_
    np.testing.assert_allclose(part.means_, full.means_, atol=1e-6)
    np.testing.assert_allclose(part.weights_, full.weights_, atol=1e-6)
    assert (part.history_["messages"][1:] <= K).all()


def test_the_stopping_rule_waits_until_every_client_was_heard():
    X, gm = _gmm("fedem", dict(participation=1 / K))
    gm.fit(X)
    assert gm.converged_ and gm.n_iter_ > K


def test_the_same_seed_draws_the_same_participants():
    X, a = _gmm("fedem", dict(participation=0.5))
    _, b = _gmm("fedem", dict(participation=0.5))
    np.testing.assert_array_equal(a.fit(X).history_["floats"], b.fit(X).history_["floats"])


@pytest.mark.parametrize("method", ["local-em", "d-fedem", "tgmm", "d-fedgrem", "federico"])
def test_only_methods_whose_server_hears_the_clients_take_participation(method):
    assert "participation" not in METHODS[method]().get_params()


@pytest.mark.parametrize("method", ["fedem", "fedgrem"])
def test_batched_and_per_client_rounds_agree_under_partial_participation(method):
    data, family, start = _problem()
    fits = [run(METHODS[method](), family, data, start, 40, 1e-8, mode, participation=Participation(0.5, 0.2, 3))
            for mode in ("batched", "per-client")]
    for a, b in zip(*(f.params for f in fits)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(fits[0].history["messages"], fits[1].history["messages"])


@pytest.mark.parametrize("method", ["fedem", "pooled-em"])
def test_communication_counts_every_query_and_the_rounds_as_history_does(method):
    """communication_: the units' sums (1 + d + d numbers up: a mixture's clients send per-feature squares), the units (d + d + 2 down: a scale per feature; 1 up), the
    common start, every round one message each way per client of the protocol's numbers (as history_'s
    floats), the first with the start (R weights, R p means, R p variances down), the final log-likelihoods;
    every client's totals add up to the queries'."""
    X, gm = _gmm(method=method, init="common")
    gm.fit(X)
    c = gm.communication_
    assert list(c["query"][:4]) == ["hello", "units", "family_start", "step"] and c["query"][-1] == "loglik"
    np.testing.assert_array_equal(c["bytes_up"][:2], [8 * K * (1 + 2 * P), 8 * K])
    np.testing.assert_array_equal(c["bytes_down"][:2], [0, 8 * K * (P + P + 2)])
    assert c["messages_down"][2] == c["messages_up"][2] == 1                     # one client draws the start
    rounds = c["query"] == "step"
    assert (c["method"][rounds] == method).all()
    start = np.zeros(rounds.sum(), dtype=int)
    start[0] = 8 * K * (R + 2 * R * P)
    np.testing.assert_array_equal(c["bytes_down"][rounds] + c["bytes_up"][rounds], 8 * gm.history_["floats"] + start)
    for direction in ("down", "up"):
        assert c[f"client_bytes_{direction}"].sum() == c[f"bytes_{direction}"].sum()
        assert c[f"client_messages_{direction}"].sum() == c[f"messages_{direction}"].sum()


def test_communication_counts_only_the_clients_a_round_hears():
    X, gm = _gmm("fedem", {"participation": 0.5})
    gm.fit(X)
    c = gm.communication_
    rounds = np.flatnonzero(c["query"] == "step")
    assert c["messages_down"][rounds[0]] == K and (c["messages_down"][rounds[1:]] == K // 2).all()


class _OneAtATime:
    """In-process clients without the calls of runs side by side: :func:`fedmm.engine.drive` runs them one after
    another, a query each, as before runs went side by side."""

    def __init__(self, clients, hide=()):
        self._clients, self._hide = clients, hide

    def __getattr__(self, name):
        if name.endswith("_runs") or name in ("together", *self._hide):
            raise AttributeError(name)
        return getattr(self._clients, name)


def _fedgrem_starts(transport):
    """FedGrEM's default starts (the trimmed pooled start's ten candidates, local EM's two starts), on an outlier
    design, through ``transport``."""
    from fedmm.clients import LocalClients
    from fedmm.initialization import make_starts
    X, _ = make_federated_gmm(5, 80, centers=CENTERS, h=0.3, outlier_clients=[4], random_state=2)
    family = GaussianFamily("diag")
    clients = transport(LocalClients(family, FederatedData.from_input(X)))
    starts = make_starts(family, METHODS["fedgrem"](), clients, R, init="pooled-and-local", n_init=2, max_iter=100,
                         tol=1e-4, alignment="consensus", random_state=np.random.RandomState(0))
    return starts, clients.ledger.summary()


@pytest.mark.parametrize("width", [None, 1])
def test_runs_side_by_side_give_the_runs_one_after_another_in_fewer_queries(width, monkeypatch):
    """The starts' runs share their queries (one message per round for all the candidates) and give the same
    numbers to the last bit as one run after another; so do they when memory lets one run at a time."""
    import fedmm.engine
    if width is not None:
        monkeypatch.setattr(fedmm.engine, "STATES_AT_ONCE", 1)
    together, shared = _fedgrem_starts(lambda c: c)
    alone, apart = _fedgrem_starts(_OneAtATime)
    for a, b in zip(together, alone):
        for x, y in zip(a.params, b.params):
            np.testing.assert_array_equal(x, y)
        assert (a.own_loglik is None) == (b.own_loglik is None)
        if a.own_loglik is not None:
            np.testing.assert_array_equal(a.own_loglik, b.own_loglik)
    if width is None:
        assert len(shared["query"]) < len(apart["query"]) / 2
        assert shared["bytes_up"].sum() == apart["bytes_up"].sum()       # the same numbers, fewer envelopes
        assert set(shared["phase"]) == {"start"}


def test_a_fit_reports_its_queries_by_phase():
    X, gm = _gmm(method="fedgrem")
    phases = gm.fit(X).communication_["phase"]
    assert list(dict.fromkeys(phases)) == ["setup", "start", "rounds"]
    queries = gm.communication_["query"]
    assert set(queries[phases == "setup"]) == {"hello", "units"}
    assert (queries[phases == "rounds"] == "step").sum() >= gm.n_iter_


def test_a_default_fedgrem_fit_asks_at_most_twice_fedems_queries_at_ten_clients():
    """Issue 60's target on its design (``validation/queries.py``): the trimmed pooled start's candidates take two
    concentration steps each before its finalists continue (``fedmm.initialization.FINALISTS``); with twenty each
    this fit asked 30 queries against FedEM's 10."""
    X, _ = make_federated_gmm(n_clients=10, n_samples=120, outlier_clients=[9], random_state=0)
    asked = {method: len(FederatedGaussianMixture(5, method=method, random_state=0).fit(X).communication_["query"])
             for method in ("fedgrem", "fedem")}
    assert asked["fedgrem"] <= 2 * asked["fedem"]


@pytest.mark.parametrize("method", ["local-em", "local-grem", "tgmm"])
def test_a_local_method_runs_each_client_alone_in_one_query(method):
    """A method whose server only echoes (``Strategy.local``) asks its clients once: each runs its rounds to its
    own stopping rule, and ends where the rounds of one query each end for that client alone, to the last bit."""
    from fedmm.clients import LocalClients
    data, family, start = _problem()
    strategy = METHODS[method]()
    clients = LocalClients(family, data)
    fit = run(strategy, family, clients, start, 200, 1e-4)
    assert list(clients.ledger.summary()["query"]) == ["local"]
    assert fit.n_iter == fit.history["log_likelihood"].size < 200
    if method == "tgmm":    # a client's prior comes from the others' starts: no client alone has it
        return
    for k in range(K):
        alone = _OneAtATime(LocalClients(family, data.clients(np.array([k]))), hide=("local",))
        own = run(strategy, family, alone, MixtureParams(*(field[k:k + 1] for field in start)), 200, 1e-4)
        assert set(alone.ledger.summary()["query"]) == {"start", "step", "loglik"}
        for x, y in zip(own.params, fit.params):
            np.testing.assert_array_equal(x[0], y[k])
        np.testing.assert_array_equal(own.loglik[0], fit.loglik[k])


def test_queries_of_several_kinds_go_in_one_message_and_give_the_same_fit(monkeypatch):
    """What the runs side by side ask at once, of any kinds (a round of one run, the log-likelihoods that end
    another, the proportions a restart refits), goes in one message: the same fit to the last bit, the same bytes,
    fewer queries than one per kind, each client counted once per message."""
    from fedmm.clients import LocalClients
    X, _ = make_federated_gmm(6, 120, outlier_clients=[5], random_state=0)
    joined = FederatedGaussianMixture(5, random_state=0).fit(X)
    together = LocalClients.together
    monkeypatch.setattr(LocalClients, "together", lambda self, batch: {
        kind: together(self, {kind: asks})[kind] for kind, asks in batch.items()})
    apart = FederatedGaussianMixture(5, random_state=0).fit(X)
    for x, y in zip(joined.params_, apart.params_):
        np.testing.assert_array_equal(x, y)
    assert joined.n_iter_ == apart.n_iter_
    one, many = joined.communication_, apart.communication_
    mixed = np.char.find(one["query"].astype(str), "+") >= 0
    assert mixed.any() and len(one["query"]) == len(many["query"]) - mixed.sum()
    # Local EM's own starts go with the trimmed pooled start's first round; that start's best candidate asks its last
    # log-likelihoods and its proportions' refit in one message.
    assert {"step+family_start", "loglik+fit_weights"} <= set(one["query"][one["phase"] == "start"])
    # So does a pass that FedGrEM restarts: the restart's refit goes with the pass's last log-likelihoods (before, a
    # query of its own: 11 queries in the rounds, now 10).
    rounds = list(one["query"][one["phase"] == "rounds"])
    assert "loglik+fit_weights" in rounds and "fit_weights" not in rounds and len(rounds) == 10
    for key in ("bytes_down", "bytes_up"):
        assert one[key].sum() == many[key].sum() == one[f"client_{key}"].sum()
    assert (one["messages_down"][mixed] == 6).all() and one["client_messages_down"].sum() == one["messages_down"].sum()


def test_a_trimmed_pooled_round_depends_on_the_parameters_sent_only():
    """The trimmed pooled start asks each candidate's last log-likelihoods with one more round, and takes the best
    one's as its continuation's first round (one query fewer): that holds because TrimmedPooledEM's client step is
    its E-step at the parameters sent, so a client carrying another run's state replies as a freshly started one."""
    from fedmm.algorithms.pooled import TrimmedPooledEM
    from fedmm.protocol import Broadcast
    data, family, start = _problem()
    strategy = TrimmedPooledEM()
    other = start._replace(weights=np.tile([0.6, 0.3, 0.1], (K, 1)), theta=start.theta + 1.0)
    fresh, _ = strategy.client_step(family, data, strategy.client_start(start, data.n_samples), Broadcast(start))
    carried, _ = strategy.client_step(family, data, strategy.client_start(other, data.n_samples), Broadcast(start))
    for x, y in zip(fresh, carried):
        for a, b in zip(*((x, y) if isinstance(x, tuple) else ((x,), (y,)))):
            np.testing.assert_array_equal(a, b)
