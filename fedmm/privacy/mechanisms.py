"""The mechanisms of a private fit (:mod:`fedmm.privacy`): a client's update as one vector (:func:`encode`) and its
clipping, the public box (:func:`clip_to_bounds`, :func:`in_the_box`), and the whitened sums at the level of samples
(their limits, noise and M-step, :func:`whitened_m_step`)."""

import numpy as np

from ..families import MixtureParams
from ..families.gaussian import WhitenedSums
from ..robust import trusted_sizes

#: Where a client's deviations' and squares' sums over its size may lie per coordinate, in the components' own
#: units (:func:`sums_limits`).
SUMS_RANGE = (1.0, 1.0, 2.0)

#: The smallest variance a release keeps, over the box's half-width squared (:func:`in_the_box`).
VARIANCE_FLOOR = 1e-6

#: The chance per round that an honest party's noisy update lies beyond :func:`local_update_limit`.
LIMIT_LEVEL = 1e-9


def local_update_limit(clip, sigma, m):
    """The largest norm an honest party's update under local noise reaches, but for a chance :data:`LIMIT_LEVEL`
    a round: its clipped update (at most ``clip``) plus its noise, ``2 sigma clip`` times a standard Gaussian
    vector of ``m`` coordinates, whose norm exceeds ``sqrt(m) + sqrt(2 t)`` with probability at most ``e^-t``
    (Laurent & Massart, Ann. Statist. 2000, Lemma 1). A reply beyond it is no honest party's."""
    return clip * (1.0 + 2.0 * sigma * (np.sqrt(m) + np.sqrt(2.0 * np.log(1.0 / LIMIT_LEVEL))))


#: How far one coordinate of a client's update may move the release in a round under secure aggregation, in
#: units of ``clip / sqrt(m)`` (:func:`coordinate_range`). Measured under SecAgg+ (10 clients, the paper's design,
#: epsilon 1e6): one party at the edges of the range left FedGrEM's honest clients at 1.21x their clean fit's
#: error with 2, 1.54x with 4, 7.1x with 6.2 (a rotated range's); clean fits the same with each. It costs accuracy
#: where the noise is large: FedEM at epsilon 4, 100 clients, 0.56 against 0.45 (median of 10 seeds).
COORDINATE_RANGE = 2.0


def coordinate_range(clip, m):
    """The range ``[-r, r]`` every coordinate of a client's update is clipped to under secure aggregation, ``r =
    COORDINATE_RANGE clip / sqrt(m)`` for updates of ``m`` coordinates: a vector in the ball of radius ``clip``
    spread over its coordinates has each about ``clip / sqrt(m)``, so honest updates are seldom clipped there,
    while a party at the range's edges in every coordinate adds a vector of norm ``COORDINATE_RANGE clip``, not
    ``sqrt(m) clip``. It is what secure aggregation can hold each party to (:mod:`fedmm.flower.secure`); a server
    that sees every update clips its norm alone (:attr:`PrivateAverage.bounded`)."""
    return float(COORDINATE_RANGE * clip / np.sqrt(m))


def bounded_updates(v, clip):
    """Every row of ``v`` (K, m) clipped into the ball of radius ``clip`` (:func:`clip_rows`) and then every
    coordinate into :func:`coordinate_range`: still in the ball, so the release's sensitivity is the ball's."""
    r = coordinate_range(clip, v.shape[-1])
    return np.clip(clip_rows(v, clip), -r, r)


def clip_rows(v, clip):
    """Every row of ``v`` (K, m) scaled into the Euclidean ball of radius ``clip`` (rows inside stay as they are),
    its norm taken in units of its largest coordinate so that no finite row overflows (a row of norm above 1e154
    would square to infinity and be clipped to 0). A non-finite row is no update: a clear error names it."""
    v = np.asarray(v, dtype=float)
    bad = np.flatnonzero(~np.all(np.isfinite(v), axis=1))
    if bad.size:
        raise ValueError(f"Update row(s) {bad[:10].tolist()} are not finite: there is nothing to clip; the client's "
                         "step diverged.")
    peak = np.maximum(np.abs(v).max(axis=1, keepdims=True), np.finfo(float).tiny)
    norms = peak * np.linalg.norm(v / peak, axis=1, keepdims=True)
    return v * np.minimum(1.0, clip / norms)


class OutsideBoundsWarning(UserWarning):
    """A client's rows lie outside the public ``bounds`` of a private fit: the client clipped them into the box
    (:func:`clip_to_bounds`). A local warning, from the client's own rows: nothing is released, nothing spent."""


def clip_to_bounds(X, lower, upper):
    """``(X clipped into [lower, upper], outside)``: one client's rows (or several clients' stacked) clipped to a
    private fit's public box, feature by feature, and the mask of the rows that had a feature outside it. The
    client does this before its first round, on its own rows (:class:`OutsideBoundsWarning`)."""
    X = np.asarray(X)
    lower, upper = np.asarray(lower, dtype=X.dtype), np.asarray(upper, dtype=X.dtype)
    outside = np.any((X < lower) | (X > upper), axis=1)
    return (np.clip(X, lower, upper) if outside.any() else X), outside


def outside_bounds_message(counts, sizes, names):
    """What a warning says of the clients ``names`` whose ``counts`` of their ``sizes`` rows lay outside the
    bounds (only those with some; the first five named)."""
    shown = [f"client {name!r}: {int(c)} of {int(n)} rows" for name, c, n in zip(names, counts, sizes)][:5]
    more = f"; {len(names) - 5} more client{'s' * (len(names) > 6)}" if len(names) > 5 else ""
    return (f"{int(np.sum(counts))} row(s) lie outside DifferentialPrivacy's bounds ({'; '.join(shown)}{more}); "
            "each client clipped its own into the bounds before the fit (a local check: nothing released, no "
            "budget spent). The fit describes the clipped rows: widen bounds to the features' public range.")


def sums_vector(sums):
    """(K, m): each client's :class:`~fedmm.families.gaussian.WhitenedSums` as one vector (what it sends under
    secure aggregation)."""
    return np.concatenate([f.reshape(len(f), -1) for f in sums if f is not None], axis=1)


def sums_bounds(family, sums, radius):
    """(m,): the largest magnitude :func:`sums_limits` allow each coordinate of :func:`sums_vector` of ``sums`` (one
    client's, over its size). Over these, a client's sums lie in ``[-1, 1]``: the one range secure aggregation
    clips every field to (:mod:`fedmm.flower.secure`)."""
    bounds = [max(-low, high) for low, high in sums_limits(family, sums, radius)]
    return sums_vector(type(sums)(*(None if f is None else np.full_like(f[:1], b, dtype=float)
                                    for f, b in zip(sums, bounds))))[0]


def sums_from_vector(v, family, point):
    """The inverse of :func:`sums_vector` for sums about the components of ``point``: ``v`` (K, m)."""
    R, p = point.theta.shape
    s = point.scale.shape[-1] if family.estimates_scale else 0
    N, Sz, Szz = np.split(v, [R, R + R * p], axis=1)
    return WhitenedSums(N, Sz.reshape(-1, R, p), Szz.reshape(-1, R, s) if s else None)


def sums_limits(family, sums, radius):
    """``[(low, high)]`` per field of ``sums`` (:class:`~fedmm.families.gaussian.WhitenedSums`): where a client's
    sums over its size may lie, in the components' own units. Counts in ``[0, 1]``; deviations within
    ``SUMS_RANGE[1]`` and squares within ``SUMS_RANGE[2]`` per coordinate (a spherical square sums ``p``
    coordinates: ``p`` times that; a full one's off-diagonal may be negative), and within what rows inside the
    ball of ``radius`` can add. An honest client's deviations average ``w_r`` times its component's displacement
    from the release, its squares ``w_r`` times its spread over the release's: at most about 1 near the fit, so
    the limits seldom bind there, and far from it they only slow a round. They bound what one party adds to the
    total whatever it sends (under secure aggregation too, :func:`sums_bounds`), and keep each row's
    sensitivity: clipping a coordinate never moves two sums apart."""
    p = sums.Sz.shape[-1]
    squares = SUMS_RANGE[2] * (p if family.covariance_type == "spherical" else 1)
    low = -1.0 if family.covariance_type in ("full", "tied") else 0.0
    return [(0.0, 1.0), (-min(SUMS_RANGE[1], radius), min(SUMS_RANGE[1], radius)),
            (low * min(squares, radius ** 2), min(squares, radius ** 2))]


def bounded_sums(family, sums, n, radius, sd):
    """Each client's sums (K rows) as the server counts them. A party's sums and size are claims
    (``docs/threat-model.md``): every coordinate of its sums over its size is kept within :func:`sums_limits`,
    widened by six of the noise standard deviations ``sd`` per field that each party's own noise adds under local
    noise (zeros otherwise); then each client counts by its trusted size (:func:`fedmm.robust.trusted_sizes`),
    its sums scaled by ``trusted / n_k``. Honest sums pass unchanged where no size exceeds the cap and no
    coordinate the limits; one party adds at most the sums of four median clients at the limits."""
    n = np.asarray(n, dtype=float)
    scale = trusted_sizes(n) / n
    sd = np.concatenate([sd, np.zeros(len(sums) - len(sd))])   # no squares' noise where there are no squares
    out = []
    for f, v, (low, high) in zip(sums, sd, sums_limits(family, sums, radius)):
        if f is None:
            out.append(None)
            continue
        size = n.reshape((-1,) + (1,) * (f.ndim - 1))
        out.append(np.clip(f, low * size - 6.0 * v, high * size + 6.0 * v) * scale.reshape(size.shape))
    return type(sums)(*out)


def noised(sums, sd, random_state):
    """Every field of ``sums`` with Gaussian noise of its standard deviation in ``sd`` added."""
    sd = np.concatenate([sd, np.zeros(len(sums) - len(sd))])   # no squares' noise where there are no squares
    return type(sums)(*(None if f is None else f + v * random_state.standard_normal(f.shape)
                        for f, v in zip(sums, sd)))


def whitened_m_step(family, total, point, sd):
    """EM's M-step (FedGrEM App. E.2; DP-EM's on noisy sums, Park et al. 2017, Alg. 1) of the totals ``total``
    (:class:`~fedmm.families.gaussian.WhitenedSums`, leading axis 1) about the components of ``point``: ``delta_r =
    Sz_r / N_r`` moves each mean by ``unwhiten(delta_r)``, and the variances are the point's scaled by ``Szz_r /
    N_r - delta_r^2`` in their own units (``L (Szz_r / N_r - delta delta^T) L^T`` for full ones, ``Sigma = L
    L^T``). ``sd``: the noise's standard deviations on the fields' sums (:func:`~fedmm.privacy.sums_noise`); each
    count is kept above three of its own and each scale factor above the squares' over ``N_r`` (at most 1), the noise's
    size in it (three of them froze the variances at their start under local noise).
    Returns ``(proportions (R,), theta (R, p), scale (R, s))``."""
    N = np.maximum(total.N[0], 3.0 * sd[0])
    delta = total.Sz[0] / N[:, None]
    theta = point.theta + family.unwhiten(delta, point.scale)
    if not family.estimates_scale:
        return N / N.sum(), theta, point.scale
    floor = np.minimum(sd[-1] / N, 1.0)
    if family.covariance_type == "full":
        R, p = delta.shape
        factor = total.Szz[0].reshape(R, p, p) / N[:, None, None] - delta[:, :, None] * delta[:, None, :]
        values, vectors = np.linalg.eigh(0.5 * (factor + np.swapaxes(factor, -1, -2)))
        factor = (vectors * np.maximum(values, floor[:, None])[:, None, :]) @ np.swapaxes(vectors, -1, -2)
        # L's columns are the unwhitened unit vectors: L^T stacked (R, p, p).
        L_t = np.swapaxes(family.unwhiten(np.broadcast_to(np.eye(p)[:, None, :], (p, R, p)), point.scale), 0, 1)
        return N / N.sum(), theta, (np.swapaxes(L_t, -1, -2) @ factor @ L_t).reshape(R, p * p)
    if family.covariance_type == "diag":
        factor = total.Szz[0] / N[:, None] - delta ** 2
    else:
        factor = (total.Szz[0] / N[:, None] - np.sum(delta ** 2, axis=-1, keepdims=True)) / delta.shape[-1]
    return N / N.sum(), theta, point.scale * np.maximum(factor, floor[:, None])


def in_the_box(family, theta, scale, lower, upper, floor=0.0):
    """``(theta, scale)`` of a release kept to what data in the box ``[lower, upper]`` (the fit's units) can
    have: means in the box, coordinate variances at most its half-widths squared (a full covariance's
    eigenvalues at most ``d`` times the largest) and at least :data:`VARIANCE_FLOOR` times them, and at least
    ``floor`` (R, 1), the noise's own scale in them where the release knows it. Post-processing of released
    numbers (nothing spent); it keeps the noise of a round from sending a component where no client's E-step
    can use it."""
    theta = np.clip(theta, lower, upper)
    if not family.estimates_scale:
        return theta, scale
    half2 = ((upper - lower) / 2.0) ** 2
    if family.covariance_type in ("full", "tied"):
        d = len(half2)
        values, vectors = np.linalg.eigh(scale.reshape(scale.shape[:-1] + (d, d)))
        values = np.clip(values, np.maximum(VARIANCE_FLOOR * half2.min(), floor), d * half2.max())
        return theta, ((vectors * values[..., None, :]) @ np.swapaxes(vectors, -1, -2)).reshape(scale.shape)
    if scale.shape[-1] == 1:   # spherical: the mean coordinate variance
        return theta, np.clip(scale, np.maximum(VARIANCE_FLOOR * half2.min(), floor), half2.max())
    return theta, np.clip(scale, np.maximum(VARIANCE_FLOOR * half2, floor), half2)


def centre_start(family, n_clients, centre):
    """One component at the centre of the bounds, ``centre`` (d,) in the units the fit runs in (0 in standard
    units), with the variances of the uniform distribution on the box (1/3 of the unit ones in standard
    units; the model's own where they are fixed): the public start the splitting schedule grows from
    (:func:`split_component`)."""
    d = len(centre)
    scale = family.unit_scale(d) / (3.0 if family.estimates_scale else 1.0)
    return MixtureParams(np.ones((n_clients, 1)), np.broadcast_to(centre, (n_clients, 1, d)).copy(),
                         np.broadcast_to(scale, (n_clients, 1, scale.size)).copy())


def shared_point(params):
    """The released components every client was sent: row 0 of ``params`` without its leading axis (weights
    (R,), theta (R, p), scale (R, s))."""
    return MixtureParams(*(field[0] for field in params))


def encode(family, n_features, params, point):
    """(..., m): updates from the public ``point`` (:func:`shared_point`) to ``params`` (weights (..., R),
    theta (..., R, p), scale (..., R, s)) as one vector each: the proportions less ``1 / R``, the means'
    displacements in the point's components' own units (:meth:`~fedmm.families.GaussianFamily.whiten`), the
    log-variances' (:meth:`~fedmm.families.Family.log_scale`). In these units every coordinate estimated from
    ``N`` samples has sd about ``1 / sqrt(N)``, so one ``clip`` suits them all."""
    R = point.weights.shape[-1]
    lead = params.weights.shape[:-1]
    parts = [params.weights - 1.0 / R, family.whiten(params.theta - point.theta, point.scale).reshape(lead + (-1,))]
    if family.estimates_scale:
        parts.append((family.log_scale(params.scale, n_features)
                      - family.log_scale(point.scale, n_features)).reshape(lead + (-1,)))
    return np.concatenate(parts, axis=-1)


def update_size(family, n_features, n_components):
    """``m``, the length of one client's update (:func:`encode`) for ``n_components`` components."""
    one = centre_start(family, 1, np.zeros(n_features))
    return n_components * encode(family, n_features, one, shared_point(one)).shape[-1]


def decode(family, n_features, v, point):
    """The inverse of :func:`encode`: ``(weights, theta, log-variances)``, ``point`` moved by the updates
    ``v`` (..., m)."""
    R, p = point.theta.shape
    lead = v.shape[:-1]
    theta = point.theta + family.unwhiten(v[..., R:R + R * p].reshape(lead + (R, p)), point.scale)
    log_scale = family.log_scale(point.scale, n_features)
    log_scale = np.broadcast_to(log_scale, lead + log_scale.shape)
    if family.estimates_scale:
        log_scale = log_scale + v[..., R + R * p:].reshape(log_scale.shape)
    return 1.0 / R + v[..., :R], theta, log_scale


def scale_of(family, n_features, log_scale, point):
    """The variances of the log-variances ``log_scale`` (the point's own where the model fixes them)."""
    if family.estimates_scale:
        return family.exp_scale(log_scale, n_features)
    return np.broadcast_to(point.scale, log_scale.shape[:-1] + point.scale.shape[-1:]).copy()


def released_proportions(weights):
    """The released mean proportions (noisy: some may be at or below 0) as proportions: floored at 1e-3 and
    summing to 1. A new stage of the splitting schedule starts every client from them (a client's own come back
    with its first E-step), and across parties they are what the server has of every client's."""
    weights = np.maximum(weights, 1e-3)
    return weights / weights.sum()
