"""fedmm on Flower: the same fit as in one process, and a server that trusts no reply."""

import json
import logging

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, Message, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402

from fedmm import FederatedGaussianMixture, FederatedMixtureRegression  # noqa: E402
from fedmm.flower import client_app, fit  # noqa: E402
from fedmm.flower.client import _ANSWERS  # noqa: E402
from fedmm.flower.codec import STYPE, arrays, config, encode, per_run  # noqa: E402
from fedmm.flower.testing import LocalGrid  # noqa: E402
from fedmm.methods import gather_options  # noqa: E402
from fedmm.metrics import estimation_errors  # noqa: E402
from fedmm.simulate import make_federated_gmm, make_federated_mor  # noqa: E402

ACTIONS = ("hello",) + tuple(_ANSWERS)
INIT = {"fedgrem": "local-em", "fedem": "common"}


def _apps(X, y=None):
    return [client_app(lambda ctx, k=k: (X[k], None if y is None else y[k])) for k in range(len(X))]


def _gmm(K=6, **kwargs):
    X, truth = make_federated_gmm(K, 120, random_state=0, **kwargs)
    return X, None, truth


def _mor(K=6, **kwargs):
    X, y, truth = make_federated_mor(K, 150, random_state=0, **kwargs)
    return X, y, truth


def _estimator(y, method, **options):
    """The estimator of ``method`` (a name) with ``options``, the method's own among them going to it."""
    cls = FederatedGaussianMixture if y is None else FederatedMixtureRegression
    options = {"init": INIT.get(method, "auto"), "method": method, "random_state": 0, "max_iter": 200, **options}
    return cls(5, **gather_options(options))


def _fit_both(X, y, method, apps=None, **options):
    """The in-process and the Flower fit; what crossed the wire is what the in-process fit counted, byte for
    byte, query by query and client by client (the fit's communication_)."""
    ref = _estimator(y, method, **options).fit(X, *([] if y is None else [y]))
    remote = fit(_estimator(y, method, **options), LocalGrid(apps or _apps(X, y)))
    if apps is None:
        for key, value in ref.communication_.items():
            np.testing.assert_array_equal(remote.communication_[key], value, err_msg=key)
    return ref, remote


@pytest.mark.parametrize("model", [_gmm, _mor])
@pytest.mark.parametrize("method", ["fedgrem", "fedem", "pooled-em", "pooled-grem"])
@pytest.mark.filterwarnings("ignore:method=.* makes no promise")
def test_a_flower_fit_with_the_defaults_equals_the_fit_in_one_process(model, method):
    """Units, the default starts (FedGrEM's trimmed pooled start from the clients' own starts and aligned
    local EM; one client's start; the clients' starts clustered by the server), rounds and restarts through
    Flower messages give the in-process parameters to 1e-8 (they agree to the last bit here)."""
    X, y, _ = model(outlier_clients=[5])
    ref, remote = _fit_both(X, y, method, init="auto")
    theta = (lambda e: e.means_) if y is None else (lambda e: e.coef_)
    np.testing.assert_allclose(theta(remote), theta(ref), rtol=0, atol=1e-8)
    np.testing.assert_allclose(remote.weights_, ref.weights_, rtol=0, atol=1e-8)
    assert remote.n_iter_ == ref.n_iter_ and remote.flower_rejections_ == []
    # Clients are named (and numbered) by their partition ids, whatever their node ids.
    np.testing.assert_array_equal(remote.client_ids_, np.arange(6))
    np.testing.assert_array_equal(remote.predict(X[2], client=2), ref.predict(X[2], client=2))


def _tampering(honest, action, tamper, after=0):
    """A malicious ClientApp: honest, except that its replies to ``action`` after the first ``after`` are
    passed through ``tamper(values, request_config) -> (values, reply_config)``."""
    app = ClientApp()
    seen = {"n": 0}

    def make(act):
        def handle(message, context):
            reply = honest(message, context)
            if act != action:
                return reply
            seen["n"] += 1
            if seen["n"] <= after:
                return reply
            cfg = {}

            def each(values):   # each run's part of a reply of runs side by side
                values, cfg["out"] = tamper(values, config(reply.content))
                return values
            values = per_run(each, arrays(reply.content))
            return Message(encode(values, **cfg.get("out", config(reply.content))), reply_to=message)
        return handle
    for act in ACTIONS:
        app.query(act)(make(act))
    return app


def _set(key, fn):
    return lambda v, c: ({**v, key: fn(v[key])}, c)


BAD_REPLIES = {
    "non-finite": (_set("theta", lambda t: t * np.nan), "non-finite"),
    "wrong shape": (_set("theta", lambda t: t[:, :, :-1]), "shape"),
    "wrong dtype": (_set("theta", lambda t: t.astype(np.float32)), "dtype"),
    "wrong component count": (_set("weights", lambda w: np.full((1, 4), 0.25)), "shape"),
    "size not a positive integer": (_set("n", lambda n: n + 0.5), "samples"),
    "size of another client": (_set("n", lambda n: n * 2), "samples"),
    "missing array": (lambda v, c: ({k: x for k, x in v.items() if k != "loglik"}, c), "arrays"),
    "stale reply": (lambda v, c: (v, {**c, "tag": "step-1"}), "stale"),
    "proportions off the simplex": (_set("weights", lambda w: w * 2), "simplex"),
}


@pytest.mark.parametrize("kind", sorted(BAD_REPLIES))
def test_each_malformed_reply_is_rejected_named_and_the_fit_goes_on(kind, caplog):
    """A client that turns bad after two rounds: its replies are rejected, logged with its node id and
    the reason, and the rounds go on with its last good message (FedGrEM, GMM). It stays bad, so after
    three rejections in a row (``STRIKES``) it is left out and the fit starts again without it (before, it
    stayed, and its stale message kept FedGrEM from converging in 200 rounds)."""
    tamper, reason = BAD_REPLIES[kind]
    X, y, _ = _gmm()
    apps = _apps(X)
    apps[3] = _tampering(apps[3], "step", tamper, after=2)
    with caplog.at_level(logging.WARNING, logger="fedmm.flower"):
        remote = fit(_estimator(None, "fedgrem", center_restarts=0), LocalGrid(apps))
    bad = [r for r in remote.flower_rejections_ if r.node == 4]
    assert bad and all(r.action == "step" and reason in r.reason for r in bad)
    assert {r.node for r in remote.flower_rejections_} == {4}
    assert "node 4" in caplog.text and reason in caplog.text
    assert np.all(np.isfinite(remote.means_))
    np.testing.assert_array_equal(remote.client_ids_, [0, 1, 2, 4, 5])


@pytest.mark.parametrize("tamper, reason", [
    (_set("n_iter", lambda n: n * 0 + 1e6), "not a number of rounds"),
    (_set("trace", lambda t: t[:-1]), "shape"),
    (_set("theta", lambda t: t * 1e12), "beyond")])
def test_a_client_whose_own_rounds_reply_is_malformed_is_left_out(tamper, reason):
    """Local EM's start runs each client's rounds on the client, one query (``local``): a reply whose rounds
    cannot be (beyond ``max_iter``, traces of another length) or whose parameters fail a round's checks has no
    earlier message to stand in for it, so the client leaves and the fit starts again without it."""
    X, y, _ = _gmm()
    apps = _apps(X)
    apps[2] = _tampering(apps[2], "local", tamper)
    remote = fit(_estimator(None, "fedgrem", center_restarts=0), LocalGrid(apps))
    assert [(r.node, r.action) for r in remote.flower_rejections_] == [(3, "local")]
    assert reason in remote.flower_rejections_[0].reason
    np.testing.assert_array_equal(remote.client_ids_, [0, 1, 3, 4, 5])


def _bad_parts(honest, tamper):
    """A ClientApp, honest except that its replies to messages of several queries (``together``) pass through
    ``tamper(values, parts) -> values`` (``parts``: the message's ``[[i, action, settings], ...]``)."""
    app = ClientApp()

    def make(act):
        def handle(message, context):
            reply = honest(message, context)
            if act != "together":
                return reply
            values = tamper(arrays(reply.content), json.loads(config(message.content)["parts"]))
            return Message(encode(values, **config(reply.content)), reply_to=message)
        return handle
    for act in ACTIONS:
        app.query(act)(make(act))
    return app


def _nan_rounds(values, parts):
    rounds = [f"p{i}/" for i, action, _ in parts if action == "step"]
    return {k: x * np.nan if k.startswith(tuple(rounds)) and k.endswith(".theta") else x for k, x in values.items()}


@pytest.mark.parametrize("tamper, every_part, reason", [
    (_nan_rounds, False, "non-finite"),
    (lambda values, parts: {**values, "p9/theta": np.zeros(1)}, True, "outside the parts asked")])
def test_each_part_of_a_message_of_several_queries_is_checked_as_its_own_query(tamper, every_part, reason):
    """FedGrEM's default fit on an outlier design sends queries of several kinds together (``together``). A round's
    part that fails is rejected as a round's reply; a reply with arrays outside the parts asked fails every part;
    only that node is named, and the fit goes on, finite."""
    X, y, _ = _gmm(outlier_clients=[5])
    apps = _apps(X)
    apps[3] = _bad_parts(apps[3], tamper)
    remote = fit(_estimator(None, "fedgrem", init="auto"), LocalGrid(apps))
    assert {r.node for r in remote.flower_rejections_} == {4}
    actions = {r.action for r in remote.flower_rejections_}
    assert len(actions) > 1 if every_part else actions == {"step"}
    assert all(reason in r.reason for r in remote.flower_rejections_)
    assert np.all(np.isfinite(remote.means_))


def test_a_client_that_raises_or_does_not_answer_is_skipped_for_the_round():
    X, y, _ = _gmm()
    apps = _apps(X)

    def boom(values, cfg):
        raise RuntimeError("disk on fire")
    apps[1] = _tampering(apps[1], "step", boom, after=3)
    grid = LocalGrid(apps)
    remote = fit(_estimator(None, "fedgrem", center_restarts=0), grid)
    assert {(r.node, r.action) for r in remote.flower_rejections_} == {(2, "step")}
    assert "disk on fire" in remote.flower_rejections_[0].reason
    grid = LocalGrid(_apps(X))
    original = grid.send_and_receive

    def drop_node_5_after_round_3(messages, timeout=None):
        messages = list(messages)
        drop_node_5_after_round_3.calls += messages[0].metadata.message_type == "query.step"
        replies = original(messages, timeout=timeout)
        return [r for r in replies if not (r.metadata.src_node_id == 5 and drop_node_5_after_round_3.calls > 3
                                           and r.metadata.message_type == "query.step")]
    drop_node_5_after_round_3.calls = 0
    grid.send_and_receive = drop_node_5_after_round_3
    remote = fit(_estimator(None, "fedgrem", center_restarts=0), grid)
    assert remote.flower_rejections_ and all(r.node == 5 and "no reply" in r.reason
                                             for r in remote.flower_rejections_)


def test_a_node_the_superlink_reports_gone_is_left_out_at_once():
    """A SuperNode that stopped sending heartbeats is answered for by the SuperLink (an error reply from node 1,
    in reply to the message sent to it): the server starts again without it at once, not waiting out a run with
    its last message, and fits the others as one process does."""
    X, y, _ = _gmm()
    grid = LocalGrid(_apps(X))
    honest, calls = grid.apps[6], []

    def vanishing(message, context):
        calls.append(message.metadata.message_type)
        if calls.count("query.step") == 3:
            grid.gone.add(6)  # after this reply, the node is gone
        return honest(message, context)
    grid.apps[6] = vanishing
    remote = fit(_estimator(None, "fedgrem", init="auto"), grid)
    # Every part of the next message it was sent is rejected, whatever queries went in it.
    assert {r.node for r in remote.flower_rejections_} == {6}
    assert all("gone" in r.reason for r in remote.flower_rejections_)
    assert calls.count("query.step") == 3  # never asked again
    np.testing.assert_array_equal(remote.client_ids_, np.arange(5))
    ref = _estimator(None, "fedgrem", init="auto").fit(X[:5])
    np.testing.assert_allclose(remote.means_, ref.means_, rtol=0, atol=1e-8)


def test_a_client_bad_from_the_start_is_left_out_and_too_few_clients_fail_clearly():
    """A bad first reply has no earlier message to stand in for it: the client leaves the federation and the
    fit starts again without it. A round that hears fewer than min_clients fails with an error."""
    X, y, _ = _gmm()
    apps = _apps(X)
    apps[0] = _tampering(apps[0], "hello", _set("sum_x", lambda s: s * np.inf))
    remote = fit(_estimator(None, "fedgrem"), LocalGrid(apps))
    np.testing.assert_array_equal(remote.client_ids_, [1, 2, 3, 4, 5])
    assert remote.flower_rejections_[0].node == 1 and remote.flower_rejections_[0].action == "hello"
    grid = LocalGrid(_apps(X))
    for k in range(4):
        grid.apps[k + 1] = _tampering(grid.apps[k + 1], "step", _set("n", lambda n: -n), after=2)
    with pytest.raises(RuntimeError, match="fewer than min_clients=3"):
        fit(_estimator(None, "fedgrem"), grid, min_clients=3)


@pytest.mark.slow  # 3 s: in CI's slow steps (.ci/run), so that the default run stays under 5 minutes
def test_fedgrem_keeps_an_adversarial_client_out_and_fedem_does_not():
    """One ClientApp sends arbitrary well-formed parameters every round (and statistics to match). The honest
    clients' FedGrEM error stays within what FedGrEM has in one process with an outlier client; FedEM's
    does not."""
    X, y, truth = _gmm(10)
    honest = np.arange(9)
    rng = np.random.RandomState(1)

    def arbitrary(values, cfg):
        theta = 6.0 * rng.standard_normal(values["theta"].shape)
        out = {**values, "theta": theta}
        if "stats.Sx" in values:
            out["stats.Sx"] = values["stats.N"][..., None] * theta
        return out, cfg
    errors = {}
    for method in ("fedgrem", "fedem"):
        apps = _apps(X)
        apps[9] = _tampering(apps[9], "step", arbitrary)
        remote = fit(_estimator(None, method), LocalGrid(apps))
        errors[method] = estimation_errors(remote.weights_, remote.means_, truth.weights, truth.theta)[1][honest].max()
    Xo, truth_o = make_federated_gmm(10, 120, random_state=0, outlier_clients=[9])
    inproc = _estimator(None, "fedgrem").fit(Xo)
    in_process = estimation_errors(inproc.weights_, inproc.means_, truth_o.weights, truth_o.theta)[1][honest].max()
    # The local rate sqrt(d / n_r) = sqrt(10 / 24) ~ 0.65 bounds the in-process error's spread.
    assert errors["fedgrem"] <= in_process + 0.65
    assert errors["fedem"] > 3 * errors["fedgrem"]


def test_clients_are_ordered_by_their_names_not_their_node_ids():
    """Node ids are the SuperLink's (random 64-bit numbers in a real run); clients with partition ids are
    numbered by those, so the fit is the in-process one on the partitions in order, to the last bit, with one
    ``hello`` (what it told the server goes with each client; before, the server asked every client again)."""
    X, _ = make_federated_gmm(6, [60, 90, 120, 150, 80, 100], random_state=0)
    node_ids = [9_000_000_000 - 7 * k for k in range(6)]   # decreasing: the reverse of the partitions
    grid, sent = LocalGrid(_apps(X), node_ids=node_ids), []
    send = grid.send_and_receive
    grid.send_and_receive = lambda messages, **kw: (sent.append(messages[0].metadata.message_type)
                                                    or send(messages, **kw))
    remote = fit(_estimator(None, "fedem"), grid)
    ref = _estimator(None, "fedem").fit(X)
    assert sent.count("query.hello") == 1 and len(sent) == len(remote.communication_["query"])
    np.testing.assert_array_equal(remote.client_ids_, np.arange(6))
    np.testing.assert_array_equal(remote.means_, ref.means_)
    for key, value in ref.communication_.items():
        np.testing.assert_array_equal(remote.communication_[key], value, err_msg=key)


@pytest.mark.parametrize("model, method", [
    pytest.param("gmm", "fedgrem", marks=pytest.mark.slow),
    pytest.param("gmm", "fedem", marks=pytest.mark.slow),
    pytest.param("mor", "fedgrem", marks=pytest.mark.slow),
    pytest.param("mor", "fedem", marks=pytest.mark.slow)])
def test_flwr_run_gives_the_in_process_fit(model, method, tmp_path, capsys):
    """flwr's own simulation runtime (``flwr run``, one SuperNode per client on Ray), quick form of
    ``fedmm flower-demo``: the fitted parameters equal the in-process ones to 1e-8. About a minute, most
    of it Flower's and Ray's start, so behind ``-m slow``: CI runs FedGrEM on Gaussian mixtures on its
    own (``.ci/run``), ``-m slow`` all four."""
    pytest.importorskip("ray")
    from fedmm.flower.demo import flower_demo
    remote, local, truth = flower_demo(n_clients=3, n_samples=100 if model == "gmm" else 150, method=method,
                                       workdir=tmp_path, model=model)
    theta = (lambda e: e.means_) if model == "gmm" else (lambda e: e.coef_)
    np.testing.assert_allclose(theta(remote), theta(local), rtol=0, atol=1e-8)
    np.testing.assert_array_equal(remote.client_ids_, [0, 1, 2])
    assert "largest difference of the parameters" in capsys.readouterr().out


def test_partial_participation_on_flower_equals_it_in_one_process():
    """The server asks a sample of clients each round and uses the others' last messages, as in one process."""
    X, y, _ = _mor()
    ref, remote = _fit_both(X, y, "fedgrem", participation=0.5, dropout=0.2)
    np.testing.assert_allclose(remote.coef_, ref.coef_, rtol=0, atol=1e-8)
    assert remote.flower_rejections_ == []


@pytest.mark.parametrize("method", ["pooled-em", "pooled-grem"])
def test_the_pooled_methods_run_on_flower_from_a_common_start(method):
    X, y, _ = _gmm()
    options = dict(method=method, init="common", random_state=0, max_iter=100)
    ref = FederatedGaussianMixture(5, **options).fit(X)
    remote = fit(FederatedGaussianMixture(5, **options), LocalGrid(_apps(X)))
    np.testing.assert_allclose(remote.means_, ref.means_, rtol=0, atol=1e-8)


def test_a_client_reads_its_rows_from_the_file_its_config_names(tmp_path):
    from types import SimpleNamespace

    from fedmm.flower.client import load_from_config
    rng = np.random.RandomState(0)
    X, y = rng.standard_normal((6, 2)), rng.standard_normal(6)
    np.savez(tmp_path / "client-3.npz", X=X, y=y)
    np.save(tmp_path / "a.npy", X)
    np.savetxt(tmp_path / "b.csv", np.column_stack([X, y]), delimiter=",", header="u,v,target", comments="")
    by_dir = SimpleNamespace(node_config={"partition-id": 3}, run_config={"data-dir": str(tmp_path)})
    np.testing.assert_array_equal(load_from_config(by_dir)[0], X)
    np.testing.assert_array_equal(load_from_config(by_dir)[1], y)
    npy = SimpleNamespace(node_config={"data-path": str(tmp_path / "a.npy")}, run_config={})
    np.testing.assert_array_equal(load_from_config(npy)[0], X)
    csv = SimpleNamespace(node_config={"data-path": str(tmp_path / "b.csv")}, run_config={"y-column": "target"})
    got_X, got_y = load_from_config(csv)
    np.testing.assert_allclose(got_X, X, rtol=1e-12)
    np.testing.assert_allclose(got_y, y, rtol=1e-12)
    with pytest.raises(ValueError, match="has no data"):
        load_from_config(SimpleNamespace(node_config={}, run_config={}))


@pytest.mark.slow  # 4 s: in CI's slow steps (.ci/run), so that the default run stays under 5 minutes
def test_auto_penalty_on_flower_chooses_and_fits_as_in_one_process():
    """penalty="auto" across separate parties: every client deals its rows into folds from the seed the
    server sends, the server fits each candidate on the rows outside a fold (queries marked train_fold) and
    the clients score the fold's rows. Rows never leave a client, and the choice, its held-out scores and
    the final fit are the in-process ones."""
    X, _, _ = _gmm(K=4, outlier_clients=[3])
    ref, remote = _fit_both(X, None, "fedgrem", penalty="auto", max_iter=60)
    assert remote.penalty_selection_["chosen"] == ref.penalty_selection_["chosen"]
    np.testing.assert_allclose(remote.penalty_selection_["client_scores"], ref.penalty_selection_["client_scores"],
                               rtol=1e-10)
    np.testing.assert_allclose(remote.means_, ref.means_, rtol=0, atol=1e-8)
    assert remote.flower_rejections_ == []

def test_arrays_travel_as_their_exact_numbers():
    values = {"theta": np.random.RandomState(0).standard_normal((3, 2, 4)), "n": np.arange(3),
              "pooled": np.array([True, False]), "empty": np.zeros((0, 2)),
              "big-endian": np.arange(4.0).astype(">f8")}
    back = arrays(encode(values))
    assert set(back) == set(values)
    for k, v in values.items():
        np.testing.assert_array_equal(back[k], v)
        assert back[k].shape == np.shape(v) and back[k].flags.writeable and back[k].dtype.isnative


@pytest.mark.parametrize("array, error", [
    (Array(dtype="|O", shape=(1,), stype=STYPE, data=b"\0" * 8), "numbers only"),
    (Array(dtype="<f8", shape=(3,), stype=STYPE, data=b"\0" * 16), "buffer|size|reshape"),
    (Array(np.zeros(3)), "serialized as"),
    (Array(dtype="no such dtype", shape=(1,), stype=STYPE, data=b"\0" * 8), "data type"),
])
def test_an_array_that_is_not_numbers_filling_its_shape_is_refused(array, error):
    """What the server's decoding raises (and turns into a rejected reply, 'malformed reply ...')."""
    content = RecordDict({"arrays": ArrayRecord({"theta": array})})
    with pytest.raises((ValueError, TypeError), match=error):
        arrays(content)


def test_the_run_config_names_the_method_and_its_options():
    from fedmm.flower.app import estimator_from_config
    est = estimator_from_config({"model": "mor", "method": "fedgrem", "method-options": '{"penalty": "paper"}',
                                 "settings": '{"max_iter": 7}'})
    assert isinstance(est, FederatedMixtureRegression) and est.max_iter == 7
    assert est.method.name == "fedgrem" and est.method.penalty == "paper"
