"""The private rounds (:mod:`fedmm.privacy`): the server's side of a private fit (:class:`PrivateAverage`,
:class:`PrivateSums`) about a method's own clients, as its :meth:`~fedmm.algorithms.Strategy.private` form
declares them; the clients' side in one process (:class:`PrivateClients`); and the stages of the public start's
splitting schedule, which the engine runs (:func:`run_stages`)."""

import contextlib

import numpy as np
from scipy import stats

from ..algorithms import Strategy
from ..algorithms.central import soft_threshold
from ..algorithms.fedem import SharedComponents
from ..engine import SILENT, run_rounds
from ..families import MixtureParams, pool_stats
from ..protocol import Broadcast, ClientMessage, put, take
from . import accounting   # release_sd through its module: what a patch of it (validation/privacy_audit.py) reaches
from .accounting import capped_shares, row_radius, sums_noise
from .mechanisms import (bounded_sums, bounded_updates, clip_rows, decode, encode, in_the_box, noised,
                         released_proportions, scale_of, shared_point, whitened_m_step)

#: The chance that a client on the consensus keeps a part of its own components under FedGrEM
#: (:func:`personal_components`), over the whole federation.
PERSONAL_LEVEL = 0.05


def split_component(family, params, mean_weights, n_features, random_state):
    """One more component (LBG's splitting, Linde, Buzo & Gray 1980; pfl's GMM grows so too): the
    component with the largest share of the spread, ``w_r tr(Sigma_r)`` from the released average
    proportions ``mean_weights`` (R,) and the shared variances, is replaced by two, its mean moved by half a
    standard deviation either way along its widest axis; each client's proportion of it is halved between
    them. Post-processing of released numbers: no privacy spent."""
    K, R, d = params.theta.shape
    variances = family.coordinate_variances(params.scale)[0]            # (R, s')
    if family.covariance_type in ("full", "tied"):
        covariance = params.scale[0].reshape(R, d, d)
        spread = np.trace(covariance, axis1=1, axis2=2)
    else:
        spread = variances.sum(axis=1) * (d if variances.shape[1] == 1 else 1)
    r = int(np.argmax(mean_weights * spread))
    if family.covariance_type in ("full", "tied"):
        values, vectors = np.linalg.eigh(covariance[r])
        axis, sd = vectors[:, -1], np.sqrt(values[-1])
    elif variances.shape[1] == d:                                       # diagonal
        j = int(np.argmax(variances[r]))
        axis, sd = np.eye(d)[j], np.sqrt(variances[r, j])
    else:                                                               # one variance: every axis alike
        axis = random_state.standard_normal(d)
        axis, sd = axis / np.linalg.norm(axis), np.sqrt(variances[r, 0])
    step = 0.5 * sd * axis
    theta = np.concatenate([params.theta, params.theta[:, r:r + 1] + step], axis=1)
    theta[:, r] -= step
    weights = np.concatenate([params.weights, params.weights[:, r:r + 1] / 2], axis=1)
    weights[:, r] /= 2
    scale = np.concatenate([params.scale, params.scale[:, r:r + 1]], axis=1)
    return MixtureParams(weights, theta, scale)


def personal_components(family, theta, point, N, centre_variance, n_clients):
    """Each client's own components under FedGrEM (its central problem's ``Delta_k`` step, eq. (6)): the
    released ``point`` plus the client's own displacement ``theta - point`` (K, R, p), in whitened units,
    soft-thresholded at ``lambda_kr = sqrt(q (1 / N_kr + v))``.

    ``N_kr`` is the client's own count of the component's samples and ``v`` the release's noise variance per
    whitened coordinate (:attr:`PrivateAverage.centre_variance`): a client on the consensus is displaced by
    about ``N(0, (1 / N_kr + v) I_p)``, and ``q`` is the ``1 - 0.05 / (K R)`` quantile (``K`` the federation's
    ``n_clients``, whatever rows ``theta`` has) of chi-square with
    ``p`` degrees of freedom, so that with probability 0.95 every such client takes the consensus exactly,
    while a client farther than the noise keeps the part of its own estimate beyond it. Computed by each
    client from its own estimate and the release: nothing more is released."""
    R, p = theta.shape[1:]
    q = stats.chi2.ppf(1.0 - PERSONAL_LEVEL / (n_clients * R), p)
    lam = np.sqrt(q * (1.0 / np.maximum(N, 1.0) + centre_variance))
    z = family.whiten(theta - point.theta, point.scale)
    return point.theta + family.unwhiten(soft_threshold(z, lam), point.scale)


def sent_params(family, point, own, n, centre_variance=None, n_clients=None):
    """The parameters the private round of clients ``own`` (K rows) starts from: each one's own proportions
    ``own.weights``, the release ``point``'s variances, and its components: the release's, or under FedGrEM
    (``centre_variance`` given) its own about them, from its own last estimate ``own.theta`` and sizes ``n``
    (:func:`personal_components`; ``n_clients`` the federation's, K by default)."""
    K = len(own.weights)
    if centre_variance is None:
        theta = np.broadcast_to(point.theta, (K,) + point.theta.shape).copy()
    else:
        theta = personal_components(family, own.theta, point, n[:, None] * own.weights, centre_variance,
                                    K if n_clients is None else n_clients)
    return MixtureParams(own.weights, theta, np.broadcast_to(point.scale, (K,) + point.scale.shape).copy())


@contextlib.contextmanager
def as_under_secure_aggregation():
    """Private fits in this block clip every coordinate of an update to :func:`coordinate_range` as secure
    aggregation does (:attr:`PrivateAverage.bounded`): the in-process fit a fit under SecAgg+ equals, up to its
    quantization."""
    PrivateAverage.bounded = True
    try:
        yield
    finally:
        PrivateAverage.bounded = False


def private_form(method, unit):
    """``method``'s :class:`~fedmm.algorithms.PrivateForm` at the level ``unit``; a ``ValueError`` where it has
    none."""
    form = method.private(unit)
    if form is None:
        raise ValueError(f"method={method.name or type(method).__name__!r} has no private form at the level of "
                         f"{unit}s: its private({unit!r}) returns None (fedmm.methods.Method.private).")
    return form


class PrivateAverage(Strategy):
    """The server's side of a private fit: the clients' updates from the released components, aggregated into
    the next release (see the package docstring), about the method's own clients.

    Under central noise the updates are clipped and averaged with shares ``s_k``, and Gaussian noise is added,
    whatever the method (for FedGrEM the clipped average is one step towards its centre with penalty ``clip``,
    :func:`~fedmm.algorithms.central.robust_centre`). Under local noise the clients' updates come noised and the
    server takes the ``centre`` of the method's :class:`~fedmm.algorithms.PrivateForm`. The clients' side is the
    method's own (its client step, options and name); the server's keeps the one estimate every client is sent
    (:class:`~fedmm.algorithms.fedem.SharedComponents`). Variances move as log-variances
    (:meth:`~fedmm.families.Family.log_scale`), so noise leaves them positive.
    """

    #: Whether every coordinate of an update is clipped to :func:`coordinate_range` as well as its norm to ``clip``:
    #: set by a transport that cannot see one client's update (secure aggregation, :mod:`fedmm.flower.secure`).
    bounded = False
    #: The level of the guarantee whose rounds this server runs (:meth:`~fedmm.algorithms.Strategy.private`).
    unit = "client"

    def __init__(self, method, family, n_features, clip, sigma, random_state, noise="central", box=None):
        self.method, self.form = method, private_form(method, self.unit)
        self.family, self.d = family, n_features
        self.box = box   # (lower, upper) in the fit's units (:func:`in_the_box`); None: unbounded
        self.clip, self.sigma, self.random_state, self.noise = clip, sigma, random_state, noise
        # Under local noise the clients draw their own, not from the server's draws (across parties they draw
        # from their own entropy); in one process from this seed, so that the server's draws (the splits) are
        # the same in one process and across parties.
        self.clients_seed = random_state.randint(2 ** 31 - 1) if noise == "local" else None
        self.centre_variance = None
        self.released = []  # every round's release: (mean proportions, theta, log-variances)

    @property
    def releases(self):
        """How many noisy aggregates were released: the rounds privacy was spent on."""
        return len(self.released)

    # --- the clients' side: the method's own ----------------------------------------------

    name = property(lambda self: self.method.name)
    per_client = property(lambda self: self.method.per_client)
    sends_stats = property(lambda self: self.method.sends_stats)
    stop_on = property(lambda self: self.method.stop_on)
    ascent = property(lambda self: self.method.ascent)

    def client_options(self):
        return self.method.client_options()

    def client_start(self, start, n_k):
        return self.method.client_start(start, n_k)

    def client_step(self, family, data, state, broadcast):
        return self.method.client_step(family, data, state, broadcast)

    def local_update(self, family, stats, state, n_k):
        return self.method.local_update(family, stats, state, n_k)

    # --- the server's side -------------------------------------------------------------

    def server_start(self, family, start, n_k):
        """The public start, alike for every client, and the release's noise variance per whitened coordinate
        from the public sizes (``centre_variance``: what the clients' personal step allows for)."""
        self.share = capped_shares(n_k)   # fixed before the first round: a reply's own size is not read again
        self.centre_variance = (self.clip * accounting.release_sd(self.sigma, self.share, self.noise)) ** 2
        self.point = shared_point(start)
        return Broadcast(start), SharedComponents(self.point.theta)

    def server_step(self, messages, state, t):
        share = self.share
        update = encode(self.family, self.d, messages, self.point)
        if self.noise == "central":
            noise = self.clip * accounting.release_sd(self.sigma, share, self.noise)
            clipped = bounded_updates(update, self.clip) if self.bounded else clip_rows(update, self.clip)
            mean = share @ clipped + noise * self.random_state.standard_normal(update.shape[1])
        else:
            mean = self.form.centre(update, share, self.clip)
        weights, theta, log_scale = decode(self.family, self.d, mean, self.point)
        return self._release(weights, theta, scale_of(self.family, self.d, log_scale, self.point), messages.n.size)

    def _release(self, weights, theta, scale, n_clients, floor=0.0):
        """The round's release, kept in the box (variances at least ``floor``), recorded and broadcast to
        ``n_clients`` clients (each one's own proportions stay with it: the clients' side keeps them)."""
        if self.box is not None:
            theta, scale = in_the_box(self.family, theta, scale, *self.box, floor=floor)
        self.released.append((weights, theta, self.family.log_scale(scale, self.d)))
        self.point = MixtureParams(weights, theta, scale)
        every = lambda a: np.broadcast_to(a, (n_clients,) + a.shape).copy()  # noqa: E731
        return Broadcast(MixtureParams(every(weights), every(theta), every(scale))), SharedComponents(theta)

    def diagnostics(self, state):
        return state

    def center(self, diagnostics):
        return diagnostics.center

    def release_history(self):
        """Every round's release, in order, as parameters of one row: mean proportions (1, R), theta (1, R, p),
        scale (1, R, s) (R grows with the splits): what every client was sent, which the guarantee covers."""
        fixed = self.point.scale[:1]   # the model's own variances, where it fixes them

        def scale(log_scale):
            if self.family.estimates_scale:
                return self.family.exp_scale(log_scale, self.d)
            return np.broadcast_to(fixed, (len(log_scale),) + fixed.shape[1:]).copy()
        return [MixtureParams(weights[None], theta[None], scale(log_scale)[None])
                for weights, theta, log_scale in self.released]

    def averaged(self, rounds):
        """The mean of the last ``rounds`` releases as a point (mean proportions, theta, scale) (Polyak-Ruppert
        averaging: once the rounds hover about the fixed point, their mean has ``rounds`` times less noise
        variance), variances averaged as log-variances."""
        weights, theta, log_scale = (np.mean(part, axis=0) for part in zip(*self.released[-rounds:]))
        return MixtureParams(weights, theta, scale_of(self.family, self.d, log_scale, self.point))


class PrivateSums(PrivateAverage):
    """The server's side of a private fit at the level of samples (``unit="sample"``): DP-EM's release (Park et
    al., AISTATS 2017) with pfl's centred and rescaled statistics, federated.

    Each round every client sends the sums of its E-step about the released components, at its own proportions, in
    the components' own units (:meth:`~fedmm.families.GaussianFamily.whitened_sums`). The server adds them up, with
    Gaussian noise of ``sigma`` times :func:`~fedmm.privacy.sums_noise` on the totals under central noise (under
    local noise each client's own on its sums), and the M-step of the noisy totals (:func:`whitened_m_step`) is the
    release: the shared components, and the pooled proportions. The clients keep their own proportions, or take the
    released ones where the method's form is ``pooled`` (pooled EM).
    """

    unit = "sample"

    def __init__(self, method, family, n_features, sigma, random_state, noise="central", box=None):
        super().__init__(method, family, n_features, None, sigma, random_state, noise, box)
        self.radius = row_radius(family.param_dim(n_features))
        self.row_sd = sigma * sums_noise(family, self.radius)   # on one party's sums
        self.centre_variance = 0.0

    def server_start(self, family, start, n_k):
        # The noise on the totals: the server's once, or every client's own.
        self.sums_sd = self.row_sd * (np.sqrt(len(n_k)) if self.noise == "local" else 1.0)
        self.point = shared_point(start)
        return Broadcast(start), SharedComponents(self.point.theta)

    def server_step(self, messages, state, t):
        total = pool_stats(messages.stats)
        if self.noise == "central":
            total = noised(total, self.row_sd, self.random_state)
        return self._release(*whitened_m_step(self.family, total, self.point, self.sums_sd), messages.n.size)


class PrivateTransport:
    """What every private fit's transport of clients shares: their sizes, ledger and family through, the public
    divergence unit, no data scale asked at the units, no log-likelihood."""

    def __init__(self, clients, average):
        self._clients, self._average = clients, average

    n_clients = property(lambda self: self._clients.n_clients)
    n_samples = property(lambda self: self._clients.n_samples)
    ledger = property(lambda self: self._clients.ledger)
    family = property(lambda self: self._clients.family)

    @property
    def data_scale(self):
        """The divergence check's unit, public: the standard units' box (the data's own maximum would be a
        release)."""
        return 1.0

    def set_units(self, units):
        self._clients.set_units(units, scale_reply=False)

    def loglik(self, params):
        return np.zeros(self.n_clients)


class _Refused(ValueError, AttributeError):
    """A query a private fit's clients refuse: a clear ``ValueError``, and no attribute to ``hasattr``."""


class PrivateClients(PrivateTransport):
    """The clients' side of a private fit in one process: a transport of clients (:mod:`fedmm.clients`) that
    releases nothing but the private rounds.

    Each client keeps what it estimated itself (its proportions, and where the method's form is ``personal``,
    FedGrEM's, its components, from which it takes its own part of the release, :func:`personal_components`). Under
    local noise it clips its update from the components it was sent and adds its own Gaussian noise, ``2 sigma
    clip`` (its update may be any point of the ball), before it replies. Log-likelihoods and sufficient statistics
    are withheld (zeros and none: the server never reads them). Every other query a fit could make reads the
    clients' rows outside the rounds the noise was calibrated for, so it fails with what to change instead.
    """

    def __init__(self, clients, average):
        super().__init__(clients, average)
        self.own = None
        seed = getattr(average, "clients_seed", None)
        self._noise = None if seed is None else np.random.RandomState(seed)

    def start(self, strategy, params):
        self._clients.start(strategy, params)
        self.own = params

    def step(self, strategy, broadcast, heard=None):
        average, family = self._average, self.family
        point = shared_point(broadcast.params)
        sums = isinstance(average, PrivateSums)
        sent = sent_params(family, point, self._own(point, for_rows=sums), self.n_samples,
                           average.centre_variance if average.form.personal else None)
        if sums:   # the sums alone leave the clients, under local noise with each one's own noise on them
            return self._sums(sent, heard)
        messages, replied = self._clients.step(strategy, broadcast._replace(params=sent), heard)
        self.own = put(self.own, replied, MixtureParams(messages.weights, messages.theta, messages.scale))
        if average.noise == "local":
            update = clip_rows(encode(family, average.d, messages, point), average.clip)
            noise = 2.0 * average.sigma * average.clip
            update = update + noise * self._noise.standard_normal(update.shape)
            weights, theta, log_scale = decode(family, average.d, update, point)
            messages = messages._replace(weights=weights, theta=theta,
                                         scale=scale_of(family, average.d, log_scale, point))
        return messages._replace(loglik=np.zeros_like(messages.loglik), stats=None), replied

    def final(self, point, centre_variance):
        """The fitted parameters of every client about the final release ``point``: its own proportions (where the
        method's form is ``pooled``: the released ones) and, where it is ``personal`` (FedGrEM), its own components
        (:func:`sent_params`)."""
        return sent_params(self.family, point, self._own(point), self.n_samples,
                           centre_variance if self._average.form.personal else None)

    def _sums(self, sent, heard):
        """The round at the level of samples: the clients ``heard`` send their
        :meth:`~fedmm.families.GaussianFamily.whitened_sums` at ``sent`` (under local noise each with its own noise
        on them), and keep their own proportions from them."""
        average = self._average
        replied = np.arange(self.n_clients) if heard is None else np.asarray(heard)
        sums = self._clients.whitened_sums(take(sent, replied), average.radius, heard)
        n = self.n_samples[replied]
        self.own = put(self.own, replied, self.own.take(replied)._replace(weights=sums.N / n[:, None]))
        local = average.noise == "local"
        if local:
            sums = noised(sums, average.row_sd, self._noise)
        sums = bounded_sums(self.family, sums, n, average.radius, average.row_sd * local)
        K = len(replied)
        messages = ClientMessage(n, np.zeros(K), np.zeros((K, sums.N.shape[1])), sent.theta[replied],
                                 sent.scale[replied], sums)
        return messages, replied

    def _own(self, point, for_rows=False):
        """What the clients keep, with the proportions of the release ``point`` for their own where the method's
        form is ``pooled`` (pooled EM), and ``for_rows`` (each row private) in every E-step: proportions a client
        computed from its own sums would carry one of its rows into every later round's sums, beyond the one row's
        sensitivity the noise covers. A client's own proportions are still its fitted ones (:meth:`final`)."""
        if not (for_rows or self._average.form.pooled):
            return self.own
        return self.own._replace(weights=np.broadcast_to(released_proportions(point.weights),
                                                         self.own.weights.shape).copy())

    def __getattr__(self, name):
        # An AttributeError too, so that hasattr (the engine asking whether a transport has a query) says no.
        raise _Refused(f"A private fit does not ask its clients for {name!r}: it would read their rows outside "
                         "the rounds the noise was calibrated for. Under privacy use the default start (the "
                         "public splitting start, or your own means_init), n_init=1, and options the data do not "
                         "choose.")


def private_server(method, privacy, family, n_features, sigma, random_state, box):
    """The server's side of ``method``'s fit under ``privacy`` (:class:`~fedmm.privacy.DifferentialPrivacy`) with
    noise multiplier ``sigma``, in the box ``box`` of the fit's units: :class:`PrivateSums` at the level of
    samples, :class:`PrivateAverage` at the level of clients."""
    if privacy.unit == "sample":
        return PrivateSums(method, family, n_features, sigma, random_state, privacy.noise, box)
    return PrivateAverage(method, family, n_features, privacy.clip, sigma, random_state, privacy.noise, box)


def run_stages(server, family, clients, start, stages, random_state, progress=SILENT, participation=None):
    """A private fit's rounds, stage by stage, each run by the engine (:func:`fedmm.engine.run_rounds`, ``tol=0``:
    no stopping rule reads the withheld log-likelihoods; every calibrated round runs) with ``server``'s side and
    the private transport ``clients`` from ``start``: ``stages`` rounds each (:func:`~fedmm.privacy.stage_rounds`),
    every stage after the first from its predecessor's model with one component split
    (:func:`split_component`, drawing from ``random_state``).

    Returns the :class:`~fedmm.engine.FitResult` of the last stage with the rounds of all: its model is the mean
    of the last stage's rounds after its first quarter, which EM settles within and which hover about its fixed
    point (Polyak-Ruppert averaging, :meth:`PrivateAverage.averaged`), its ``diagnostics.center`` that model's
    components; each client's proportions (where the form is ``personal``, its components) are its own
    (:meth:`PrivateClients.final`)."""
    passes = []
    K, n_features = clients.n_clients, start.theta.shape[-1]
    every = lambda a: np.broadcast_to(a, (K,) + a.shape).copy()  # noqa: E731  (one row per client)
    for i, rounds in enumerate(stages):
        if i:   # split the previous stage's model: the mean of its second half of rounds (less noise)
            point = server.averaged(max(stages[i - 1] // 2, 1))
            stage = MixtureParams(every(released_proportions(point.weights)), every(point.theta), every(point.scale))
            start = split_component(family, stage, point.weights, n_features, random_state)
        R = start.theta.shape[1]
        progress.begin(f"private stage {i + 1} of {len(stages)} ({R} component{'s' * (R > 1)})")
        passes.append(run_rounds(server, family, clients, start, rounds, 0.0, progress=progress,
                                 participation=participation))
    averaged = max(stages[-1] * 3 // 4, 1)
    point = server.averaged(averaged)
    params = clients.final(point, server.centre_variance / averaged)
    return passes[-1]._replace(params=params, n_iter=sum(p.n_iter for p in passes),
                               diagnostics=passes[-1].diagnostics._replace(center=point.theta))
