"""A private fit across parties (fedmm.flower.secure): its rounds under Flower's SecAgg+, the in-process fit's."""

import contextlib

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("dp_accounting")

from fedmm import FederatedGaussianMixture  # noqa: E402
from fedmm.flower import client_app, fit  # noqa: E402
from fedmm.flower.codec import arrays  # noqa: E402
from fedmm.flower.secure import quantization_range  # noqa: E402
from fedmm.flower.testing import LocalGrid  # noqa: E402
from fedmm.methods import METHODS  # noqa: E402
from fedmm.privacy import DifferentialPrivacy, as_under_secure_aggregation  # noqa: E402
from fedmm.simulate import make_federated_gmm  # noqa: E402

QUIET = pytest.mark.filterwarnings("ignore::fedmm.data.EmptyComponentWarning",
                                   "ignore::fedmm.data.SingularComponentWarning", "ignore::UserWarning")


class _Recorded(LocalGrid):
    """A LocalGrid that keeps every message and its reply, as the server received it."""

    def __init__(self, apps):
        super().__init__(apps)
        self.exchanges = []

    def send_and_receive(self, messages, *, timeout=None):
        replies = super().send_and_receive(messages, timeout=timeout)
        by_id = {m.metadata.message_id: m for m in messages}
        self.exchanges += [(by_id[r.metadata.reply_to_message_id], r) for r in replies]
        return replies


def _fits(method, K=4, rounds=20, unit="client", noise="central", epsilon=4.0, means_init=False, methods=()):
    X, truth = make_federated_gmm(K, 100, random_state=0)
    options = dict(method=method, random_state=0, privacy=DifferentialPrivacy(epsilon, 1e-6, bounds=(-7, 7),
                                                                             rounds=rounds, unit=unit, noise=noise))
    if means_init:   # one stage from the design's centres (moved by 0.5): no split decisions
        options["means_init"] = truth.theta[0] + 0.5
    grid = _Recorded([client_app(lambda ctx, k=k: (X[k], None), methods=methods) for k in range(K)])
    remote = fit(FederatedGaussianMixture(5, **options), grid)
    # Secure aggregation clips every coordinate of an update as well as its norm: the in-process fit it must
    # equal does the same.
    with as_under_secure_aggregation() if noise == "central" else contextlib.nullcontext():
        local = FederatedGaussianMixture(5, **options).fit(X)
    return remote, local, grid


@QUIET
def test_a_private_fedem_fit_under_secure_aggregation_is_the_in_process_one_and_the_server_sees_no_update():
    """Four clients, epsilon 4, 20 rounds from the public splitting start: the same noise, drawn by the server
    from random_state, on the same means of clipped updates up to SecAgg+'s quantization, which moves a mean
    coordinate by at most 2 clip / 2^22 = 4.8e-7 a round (and the weights by 2^-22): the fitted means agree to
    1e-4 (measured 2.2e-5, the splits amplifying it). What reached the server: sizes and feature counts at hello,
    nothing at units, and, in every SecAgg+ stage, masked vectors and keys but no array of any client."""
    remote, local, grid = _fits("fedem")
    np.testing.assert_allclose(remote.means_, local.means_, rtol=0, atol=1e-4)
    assert remote.privacy_spent_ == pytest.approx(local.privacy_spent_)
    assert remote.n_iter_ == local.n_iter_ == 20
    kinds = set()
    for message, reply in grid.exchanges:
        kind = message.metadata.message_type
        kinds.add(kind)
        assert not reply.has_error()
        if kind == "train":     # SecAgg+'s stages: the mod clears the update before the reply leaves
            assert all(len(record) == 0 for record in reply.content.array_records.values())
        elif kind == "query.hello":
            assert set(arrays(reply.content)) == {"n", "d"}
        else:
            assert kind in ("query.units", "query.start") and not arrays(reply.content)
    assert kinds == {"query.hello", "query.units", "query.start", "train"}
    # Every private round is one SecAgg+ aggregation, four stages of messages, in the fit's communication.
    queries = list(remote.communication_["query"])
    assert queries.count("secure-step") == 4 * 20


@QUIET
def test_a_private_fedgrem_fit_under_secure_aggregation_releases_the_in_process_centre():
    """FedGrEM's clients keep their own components (they stay with them): the server's fit is the released
    centre, the in-process fit's to 1e-4."""
    remote, local, _ = _fits("fedgrem", rounds=10)
    np.testing.assert_allclose(remote.center_, local.center_, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(remote.means_, np.broadcast_to(remote.center_, remote.means_.shape))


@QUIET
@pytest.mark.parametrize("method", ["fedem", "pooled-em"])
def test_privacy_for_each_row_under_secure_aggregation_is_the_in_process_fit(method):
    """unit="sample": each client sends its whitened sums over its size, each field over its per-row limit (all in
    [-1, 1]), scaled by its trusted size over the largest; the secure sum scaled back is the in-process total, up
    to the quantization of coordinates within [-1, 1] (the probe undoing the weights exactly): 2 / 2^22 = 4.8e-7
    of a limit a round, at most 2 * 100 * 4.8e-7 = 1e-4 of a total of 400 rows, which moves a mean by at most
    1e-4 / 80 of its component's spread a round: 2.5e-5 over 20 rounds were none of it undone. The fitted means
    agree to 2e-3 (measured 3.3e-6 for FedEM, 1.4e-5 for pooled EM: SecAgg+'s rounding is random). FedEM's
    clients keep their own proportions, which stay with them: the server has the released ones for every
    client."""
    remote, local, grid = _fits(method, unit="sample")
    np.testing.assert_allclose(remote.means_, local.means_, rtol=0, atol=2e-3)
    np.testing.assert_allclose(remote.weights_, np.broadcast_to(remote.weights_[0], remote.weights_.shape))
    if method == "pooled-em":
        np.testing.assert_allclose(remote.weights_, local.weights_, rtol=0, atol=1e-4)
    assert all(len(record) == 0 for message, reply in grid.exchanges if message.metadata.message_type == "train"
               for record in reply.content.array_records.values())


@QUIET
@pytest.mark.parametrize("method, unit", [("fedem", "client"), ("fedgrem", "client"), ("fedem", "sample")])
def test_under_local_noise_each_party_noises_its_own_reply_and_the_fit_is_the_in_process_one(method, unit):
    """noise="local" across parties: each client adds its own noise, from its own entropy, to what it sends in
    the clear (query private_step); the in-process fit draws it from its own generator. At epsilon 1e6 (sigma
    3.3e-3, 20 rounds from given means: no split decisions, which a noise this small can flip) each update
    carries 2 sigma clip = 6.6e-3 per whitened coordinate, the average of four 3.3e-3: two fits' means differ by
    about 4.7e-3 of a component's spread (about 1) a round, 2.1e-2 over 20 rounds as a random walk, and the
    largest of 200 coordinates by about three of those: 0.1 (measured 3.1e-2 and 4.3e-2). Each row private,
    the sums' noise is sigma c / sqrt(0.2) = 0.04 on counts of about 80: 1e-2 (measured 7.6e-4)."""
    remote, local, grid = _fits(method, unit=unit, noise="local", epsilon=1e6, means_init=True)
    np.testing.assert_allclose(remote.means_, local.means_, rtol=0, atol=0.1 if unit == "client" else 1e-2)
    kinds = {message.metadata.message_type for message, _ in grid.exchanges}
    assert kinds == {"query.hello", "query.units", "query.start", "query.private_step"}


@QUIET
@pytest.mark.parametrize("noise", ["central", "local"])
def test_a_method_from_outside_fits_privately_across_parties(noise):
    """tests/median_em.py's private form, with no edit to fedmm, on Flower: under secure aggregation its release is
    FedEM's (the in-process fit's to 1e-4, as FedEM's above); under local noise each party noises its own update
    and the server takes MedianEM's median of them (the in-process fit's within the noise's reach, as above)."""
    from median_em import MedianEM
    remote, local, grid = _fits(MedianEM(), noise=noise, epsilon=4.0 if noise == "central" else 1e6,
                                means_init=noise == "local", methods=[MedianEM])
    assert isinstance(remote.method_, MedianEM) and remote.n_iter_ == local.n_iter_ == 20
    np.testing.assert_allclose(remote.means_, local.means_, rtol=0, atol=1e-4 if noise == "central" else 0.1)


@QUIET
def test_under_local_noise_what_the_server_receives_carries_the_calibrated_noise():
    """At epsilon 4 every update the server receives is a clipped update (norm at most clip = 1 over 105
    coordinates) plus the client's noise of standard deviation 2 sigma clip (12.4 for 20 rounds): over 4
    clients, 20 rounds and 105 coordinates the replies' sample standard deviation is within 5% of it (its
    relative sd is 1 / sqrt(2 * 8400) < 1%; the updates add at most 1 / 12.4^2 / 2 = 0.3% to it)."""
    remote, _, grid = _fits("fedgrem", noise="local", means_init=True)
    replies = np.concatenate([arrays(reply.content)["update"] for message, reply in grid.exchanges
                              if message.metadata.message_type == "query.private_step"])
    assert replies.size == 4 * 20 * 105
    assert abs(replies.std() / (2 * remote.noise_multiplier_) - 1) < 0.05


@pytest.mark.parametrize("method, privacy, match", [
    (METHODS["fedem"](participation=0.5), DifferentialPrivacy(bounds=(-7, 7)), "participation=1")])
def test_what_secure_aggregation_cannot_run_is_refused(method, privacy, match):
    X, _ = make_federated_gmm(2, 50, random_state=0)
    with pytest.raises(ValueError, match=match):
        fit(FederatedGaussianMixture(2, method=method, privacy=privacy),
            LocalGrid([client_app(lambda ctx, k=k: (X[k], None)) for k in range(2)]))


def test_the_quantization_keeps_the_sum_of_every_client_below_the_modulus():
    """SecAgg+ sums the clients' quantized updates modulo 2^32: K of them must stay below it."""
    for K in (2, 100, 512, 513, 10_000):
        assert K * quantization_range(K) <= 2 ** 31 < 2 ** 32
    assert quantization_range(4) == 2 ** 22


@QUIET
@pytest.mark.slow
def test_flwr_run_gives_the_in_process_private_fit(tmp_path):
    """flwr's own simulation runtime (``flwr run``, one SuperNode per client on Ray) with the private run config:
    Flower's SecAgg+ workflow and mod between real SuperNodes; the fitted means equal the in-process private
    fit's up to SecAgg+'s quantization (1e-4, see above)."""
    pytest.importorskip("ray")
    from fedmm.flower.demo import flower_demo
    privacy = {"epsilon": 4.0, "delta": 1e-6, "bounds": [-7.0, 7.0], "rounds": 10}
    remote, local, _ = flower_demo(n_clients=3, n_samples=100, method="fedem", workdir=tmp_path, privacy=privacy)
    np.testing.assert_allclose(remote.means_, local.means_, rtol=0, atol=1e-4)
    assert remote.privacy_spent_ == pytest.approx(local.privacy_spent_)


@QUIET
@pytest.mark.parametrize("method", ["fedem", "fedgrem"])
def test_under_local_noise_a_party_beyond_what_noise_reaches_is_dropped_and_named(method, caplog):
    """One party of four replies 1e3 in every coordinate of its update (issue 58: it stopped the fit with a
    DivergenceError naming every client). No honest noisy update reaches local_update_limit but once in a billion
    rounds, so the party is dropped every round, named in the log, and the fit ends as the honest parties'
    release moves it: within 0.5 of a spread of the fit without the attack (epsilon 1e6, the same seeds)."""
    from fedmm.flower.attacks import tampered
    X, _ = make_federated_gmm(4, 100, random_state=0)
    options = dict(method=method, random_state=0, means_init=make_federated_gmm(1, 10, random_state=0)[1].theta[0]
                   + 0.5, privacy=DifferentialPrivacy(1e6, 1e-6, bounds=(-7, 7), rounds=20, noise="local"))
    apps = [client_app(lambda ctx, k=k: (X[k], None)) for k in range(4)]
    clean = fit(FederatedGaussianMixture(5, **options), LocalGrid(apps))
    apps[3] = tampered(apps[3], {"private_step": lambda v: {"update": np.full_like(v["update"], 1e3)}})
    with caplog.at_level("WARNING", logger="fedmm.flower"):
        attacked = fit(FederatedGaussianMixture(5, **options), LocalGrid(apps))
    assert "dropped node 4's private update" in caplog.text
    assert np.abs(attacked.means_[:3] - clean.means_[:3]).max() < 0.5


@QUIET
def test_under_secure_aggregation_one_party_moves_a_round_by_at_most_its_bound():
    """Five clients in 20 dimensions, two components started half way to theirs, epsilon 1e6: the first release
    with one party's every coordinate at the top of SecAgg+'s range against the clean release. The party's
    vector is held within 2 clip / sqrt(m) per coordinate (norm 2 clip), so the release's update moves by at
    most its share (1/5) of 2 clip + clip (the honest update it replaces): its means, whitened by the start's
    spread, by at most 0.6 (measured 0.28). Before issue 58 the range was clip per coordinate (norm sqrt(82)
    clip = 9.1 clip): they moved by 0.92."""
    from fedmm.flower.attacks import secure_tampering
    start = np.array([np.full(20, -1.0), np.full(20, 1.0)])
    rs = np.random.RandomState(0)
    X = [2 * start[rs.randint(2, size=60)] + rs.standard_normal((60, 20)) for _ in range(5)]
    released = []
    for tamper in (None, "secure-range"):
        apps = [client_app(lambda ctx, k=k: (X[k], None), mods=[secure_tampering(tamper)] if tamper and k == 4
                           else []) for k in range(5)]
        fitted = fit(FederatedGaussianMixture(2, method="fedem", random_state=0, means_init=start, privacy=(
            DifferentialPrivacy(1e6, 1e-6, bounds=(-7, 7), rounds=2))), LocalGrid(apps))
        released.append(fitted.releases_[0].theta[0])
    spread = 14.0 / np.sqrt(12.0)          # the start's standard deviation: the box's uniform one
    assert np.linalg.norm(released[1] - released[0]) / spread <= 0.6


def test_the_probe_reads_back_the_weights_secure_aggregation_divided_by():
    """SecAgg+ returns sum_k rho_k clip(v_k) / sum_k rho_k, rho_k the weights the parties report: every honest
    party reports 1 and sets its probe at the range's top, so the probe's mean gives sum_k rho_k back, whatever
    one party that otherwise follows the protocol reports (its probe, times its weight, is clipped to the top)."""
    from fedmm.flower.secure import reported_total
    top, rho = 0.3, np.array([1.0, 1.0, 1.0, 1.0, 50.0])
    probes = np.clip(rho * top, -top, top)
    assert reported_total(probes.sum() / rho.sum(), 5, top) == pytest.approx(rho.sum())
    assert reported_total(0.0, 5, top) == 5.0


@pytest.mark.filterwarnings("ignore::fedmm.data.EmptyComponentWarning", "ignore::fedmm.data.SingularComponentWarning")
def test_each_party_clips_its_rows_into_the_bounds_and_warns_there_as_in_process():
    from fedmm.privacy import OutsideBoundsWarning
    X, _ = make_federated_gmm(4, 100, random_state=0)
    X = [x.copy() for x in X]
    X[1][:5, 0] = 30.0
    options = dict(method="fedem", random_state=0, privacy=DifferentialPrivacy(4.0, 1e-6, bounds=(-7, 7), rounds=20))
    grid = LocalGrid([client_app(lambda ctx, k=k: (X[k], None)) for k in range(4)])
    with pytest.warns(OutsideBoundsWarning, match="5 of 100 rows"):
        remote = fit(FederatedGaussianMixture(5, **options), grid)
    with as_under_secure_aggregation(), pytest.warns(OutsideBoundsWarning):
        local = FederatedGaussianMixture(5, **options).fit(X)
    np.testing.assert_allclose(remote.means_, local.means_, atol=1e-4)
