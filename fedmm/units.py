"""Units: the internal standardization that makes every estimate equivariant.

A user who rescales or shifts the data (``a X + b``; for regressions also
``c y + e`` and, where the model allows it, any invertible linear map of the
features) must get the same clustering and the same parameters mapped back.
Every estimation step of fedmm is written so that it depends on the data only
through quantities that transform with them, except three places that have a
unit of their own: the k-means start (isotropic), the plain gradient step of
a regression (it assumes ``E[x x^T] = I``, FedGrEM Sec. 3.4) and the small
regularizers (``reg_covar``, ``reg_coef``). fedmm therefore fits in standard
units and maps the estimates back:

- the server pools per-client sums (``n_k``, ``sum x``, ``sum x x^T``,
  ``sum y``, ``sum y^2``): a summary like any other message, no raw data;
- the family says which map its model is equivariant under
  (:meth:`fedmm.families.Family.units`): none for the paper's identity
  covariance and fixed noise variances (their unit *is* the model), a shift
  and one scale for spherical covariances, a shift and a scale per feature
  for diagonal, full and tied ones (not a whitening, which hides clusters
  from the k-means start), a shift and full whitening of ``x`` plus a shift
  and scale of ``y`` for regressions;
- the fitted parameters are mapped back by the family
  (:meth:`fedmm.families.Family.to_original`).

The moments leave out clients far from the others (:func:`moments_from_sums`):
a party that lies about its sums, or brings data in other units, moves them
only boundedly. A client within range still moves them: for the spherical
model and the pooled regression methods that changes only the floating-point
path (their other steps are equivariant under the maps those
standardizations use). For diagonal covariances it changes the features'
relative scale (diagonal, full and tied), hence the metric of the k-means
start and the size of ``reg_covar``; for the other regression methods the
whitened features differ by a rotation, which the coordinate-wise medians of
the alignment do not follow. Either can change a start, not the model.
"""

from typing import NamedTuple

import numpy as np
from numba import njit

from .robust import trusted_sizes

__all__ = ["Units", "Moments", "pooled_moments", "client_sums", "moments_from_sums", "client_distances",
           "far_from_others"]


class Moments(NamedTuple):
    """Pooled first and second moments of the clients' data (:func:`moments_from_sums`, from the clients' sums).

    Attributes
    ----------
    mean : ndarray of shape (d,)
    second : ndarray of shape (d, d) or (d,)
        ``sum_i x_i x_i^T / n`` (uncentered) where the data carry responses; each feature's ``sum_i x_ij^2 / n``
        otherwise (:func:`_clients_sums`).
    y_mean, y_second : float or None
        The same for the responses.
    """

    mean: np.ndarray
    second: np.ndarray
    y_mean: float | None
    y_second: float | None


def client_sums(data):
    """One client's sums ``{"n", "sum_x", "sum_xx"[, "sum_y", "sum_yy"]}``: what it sends for the moments
    (:func:`_clients_sums` of one client, so that a remote client sends the numbers the in-process one adds)."""
    sums = _clients_sums(data.X, data.y, np.array([0, len(data.X)]))
    return {key: value[0] for key, value in sums.items()}


def _clients_sums(X, y, offsets):
    """Every client's sums of :func:`client_sums` (client ``k``: rows ``offsets[k]:offsets[k+1]``), stacked with
    a leading client axis: ``n`` (K, 1), ``sum_x`` (K, d), ``sum_xx``, and for responses ``sum_y``, ``sum_yy``
    (K, 1). ``sum_xx`` is each feature's ``sum x_j^2`` (K, d) where the data carry no responses (a mixture's
    units scale each feature, :meth:`fedmm.families.GaussianFamily.units`: ``O(n d)`` work and ``d`` numbers a
    client, not ``d^2``) and the whole ``sum x x^T`` (K, d, d) where they do (a regression whitens its
    features). One compiled pass, in float64 also for float32 data (the variance ``sum_xx / n - mean^2``
    cancels: float32 sums of a million rows far from 0 would leave noise)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    full = y is not None
    sum_x, sum_xx = _moment_sums(X, offsets, np.zeros((len(offsets) - 1, X.shape[1], X.shape[1] if full else 1)))
    sums = {"n": np.diff(offsets).astype(np.float64)[:, None], "sum_x": sum_x, "sum_xx": sum_xx if full else
            sum_xx[:, :, 0]}
    if full:
        sum_y, sum_yy = _moment_sums(np.ascontiguousarray(y).reshape(-1, 1), offsets, np.zeros((len(offsets) - 1, 1, 1)))
        sums.update(sum_y=sum_y, sum_yy=sum_yy[:, 0])
    return sums


@njit(cache=True)
def _moment_sums(X, offsets, sum_xx):
    """Each client's ``sum_i x_i`` (K, d) in float64, and into ``sum_xx`` (K, d, d) its ``sum_i x_i x_i^T``, or
    into ``sum_xx`` (K, d, 1) each feature's ``sum_i x_ij^2`` only, summed about the client's first row ``s``
    and shifted back (``sum x x^T = sum z z^T + s (sum z)^T + (sum z) s^T + n s s^T``, ``z = x - s``: the
    shifted-data algorithm, Chan, Golub & LeVeque, Am. Stat. 1983): far from 0 the variance's cancellation
    then costs the rounding of the shift-back, not of every row's square. A feature's square is the same number
    either way. Returns ``(sum_x, sum_xx)``."""
    K, d = offsets.shape[0] - 1, X.shape[1]
    full = sum_xx.shape[2] == d and d > 1
    sum_x = np.zeros((K, d))
    z = np.empty(d)
    for k in range(K):
        lo, hi = offsets[k], offsets[k + 1]
        if hi == lo:
            continue
        s = X[lo].astype(np.float64)
        c1 = np.zeros(d)
        c2 = np.zeros(sum_xx.shape[1:])
        for i in range(lo, hi):
            for a in range(d):
                z[a] = X[i, a] - s[a]
                c1[a] += z[a]
                first = 0 if full else a   # per feature: b = a only, in column 0
                for b in range(first, a + 1):
                    c2[a, b - first] += z[a] * z[b]
        n = float(hi - lo)
        for a in range(d):
            sum_x[k, a] = c1[a] + n * s[a]
            first = 0 if full else a
            for b in range(first, a + 1):
                sum_xx[k, a, b - first] = c2[a, b - first] + s[a] * c1[b] + c1[a] * s[b] + n * s[a] * s[b]
                if full:
                    sum_xx[k, b, a] = sum_xx[k, a, b]
    return sum_x, sum_xx


#: A client enters the moments in full while its data lie within this many robust scales of the federation's
#: location on every feature (and ``y``), and not at all beyond twice as many (:func:`moments_from_sums`).
UNITS_RANGE = 5.0

#: Beyond this many robust scales no honest data set lies (as :func:`fedmm.engine.divergence_bound`): a remote
#: server leaves such a client out (:func:`far_from_others`).
FAR = 1e8


def moments_from_sums(sums):
    """The pooled moments of the clients' :func:`client_sums`, over the clients whose sums are typical.

    The sums are claims (``docs/threat-model.md``): one party's ``sum x = 1e200`` would move every honest
    client's data to 0 in standard units. So each client enters the pooled sums with the weight
    ``clip(2 - d_k / UNITS_RANGE, 0, 1)``, ``d_k`` its distance from the others in robust scales
    (:func:`client_distances`): in full within :data:`UNITS_RANGE` scales, not at all beyond twice that,
    and at most at :func:`fedmm.robust.trusted_sizes` (a claimed size beyond a multiple of the median
    counts as that multiple). With every client typical, the weights are exactly 1 and the moments
    the pooled ones to the last bit: an honest federation's standardization is unchanged. Added in one
    reduction over the stacked clients, in-process as across parties, so both see the same numbers.
    """
    return _moments(_stacked(sums))


def _stacked(sums):
    """The clients' sums (a list of :func:`client_sums`) as arrays with a leading client axis."""
    return {key: np.stack([s[key] for s in sums]) for key in sums[0]}


def _moments(stacked):
    """:func:`moments_from_sums` of the clients' sums stacked (:func:`_stacked`)."""
    n = stacked["n"][:, 0]
    weight = np.clip(2.0 - _client_distances(stacked) / UNITS_RANGE, 0.0, 1.0) * (trusted_sizes(n) / n)
    total = {key: np.add.reduce(weight.reshape((-1,) + (1,) * (value.ndim - 1)) * value, axis=0)
             for key, value in stacked.items()}
    n = total["n"][0]
    y_mean = y_second = None
    if "sum_y" in total:
        y_mean, y_second = float(total["sum_y"][0] / n), float(total["sum_yy"][0] / n)
    return Moments(total["sum_x"] / n, total["sum_xx"] / n, y_mean, y_second)


def client_distances(sums):
    """(K,) how far each client's data lie from the others', in robust scales.

    With ``m_k`` client ``k``'s mean, ``c = median_k m_k`` (coordinate-wise) and ``D_kj`` its mean square
    of feature ``j`` about ``c``: ``d_k = max_j sqrt(D_kj / median_k' D_k'j)``, also over ``y``. About 1 for
    clients alike; it grows with a client's offset and its spread alike. Each feature's ratio is unchanged
    by a shift or scaling of that feature.
    """
    return _client_distances(_stacked(sums))


def _client_distances(stacked):
    """:func:`client_distances` of the clients' sums stacked (:func:`_stacked`)."""
    n = stacked["n"]
    squares = stacked["sum_xx"]
    squares = np.diagonal(squares, axis1=1, axis2=2) if squares.ndim == 3 else squares
    distance = _distances(stacked["sum_x"] / n, squares / n)
    if "sum_y" in stacked:
        distance = np.maximum(distance, _distances(stacked["sum_y"] / n, stacked["sum_yy"] / n))
    return distance


def _distances(means, squares):
    """:func:`client_distances` of one block of features, from the clients' means and mean squares (K, d)."""
    c = np.median(means, axis=0)
    # sum (x - c)^2 / n = mean square - 2 m c + c^2, without squaring m (an enormous claim overflows first); its
    # absolute value, so that inconsistent sums (a negative "spread") count as far.
    with np.errstate(over="ignore", invalid="ignore"):
        about = np.abs(squares - 2.0 * means * c + c ** 2)
        distance = np.sqrt(about / scale_or_one(np.median(about, axis=0)) ** 2).max(axis=1)
    return np.nan_to_num(distance, nan=np.inf)


def far_from_others(sums):
    """(K,) bool: clients whose sums put their data beyond :data:`FAR` robust scales from the others
    (:func:`client_distances`). No honest data set lies there; a remote server leaves such a client out."""
    return client_distances(sums) > FAR


def pooled_moments(data):
    """The moments of in-process clients: every client's :func:`client_sums`, combined by
    :func:`moments_from_sums` (the same numbers, from one pass over the contiguous data)."""
    return _moments(_clients_sums(data.X, data.y, data.offsets))


class Units(NamedTuple):
    """An affine change of units: ``z = (x - x_shift) @ x_map``, ``y_std = (y - y_shift) / y_scale``.

    Attributes
    ----------
    x_shift : ndarray of shape (d,)
    x_map : ndarray of shape (d, d) or (d,)
        Invertible; a vector is the diagonal map ``diag(x_map)``, a scale per feature (the Gaussian family's:
        ``O(d)`` numbers and work, not ``O(d^2)`` or the ``O(d^3)`` of an inverse).
    y_shift, y_scale : float
    """

    x_shift: np.ndarray
    x_map: np.ndarray
    y_shift: float = 0.0
    y_scale: float = 1.0

    @classmethod
    def identity(cls, d):
        return cls(np.zeros(d), np.ones(d))

    def map_moments(self, moments):
        """The :class:`Moments` of the data in these units, ``z = (x - x_shift) W``: mean ``(m - x_shift) W``
        and second moments ``E[z z^T] = W^T E[(x - x_shift)(x - x_shift)^T] W``, per feature where the moments
        are (``E[z_j^2] = E[(x_j - x_shift_j)^2] W_j^2``, a diagonal map); the responses' left out."""
        m, c = moments.mean, self.x_shift
        if np.ndim(moments.second) == 1:
            w = self.x_map if self.x_map.ndim == 1 else np.diag(self.x_map)
            return Moments((m - c) * w, (moments.second - 2.0 * c * m + c ** 2) * w ** 2, None, None)
        W = np.diag(self.x_map) if self.x_map.ndim == 1 else self.x_map
        about = moments.second - np.outer(c, m) - np.outer(m, c) + np.outer(c, c)
        return Moments((m - c) @ W, W.T @ about @ W, None, None)

    @property
    def log_abs_det(self):
        """``log |det x_map|``: the map's log-Jacobian per sample of ``x``."""
        if self.x_map.ndim == 1:
            return float(np.sum(np.log(np.abs(self.x_map))))
        return float(np.linalg.slogdet(self.x_map)[1])

    def transform(self, data):
        """The data in standard units (same clients and order); the data themselves when nothing changes.

        Computed in the data's own precision, so float32 data stay float32 (:class:`fedmm.data.FederatedData`).
        """
        dtype = data.X.dtype
        diagonal = self.x_map if self.x_map.ndim == 1 else np.diag(self.x_map)
        if self.x_map.ndim == 1 or np.array_equal(self.x_map, np.diag(diagonal)):
            if not self.x_shift.any() and np.all(diagonal == 1.0) and self.y_shift == 0.0 and self.y_scale == 1.0:
                return data
            X = np.ascontiguousarray(data.X - self.x_shift.astype(dtype))         # O(n d), one new array
            X *= diagonal.astype(dtype)
        else:
            X = np.ascontiguousarray((data.X - self.x_shift.astype(dtype)) @ self.x_map.astype(dtype))
        y = None if data.y is None else (data.y - self.y_shift) / self.y_scale
        return type(data)(X, y, data.offsets, data.client_ids, data.order)


def scale_or_one(variance):
    """Standard deviations, with 1 for features that do not vary (nothing to scale).

    "Does not vary" is relative to the largest standard deviation, never to
    1, so data in tiny units (1e-13) are scaled like any others.
    """
    sd = np.sqrt(np.maximum(variance, 0.0))
    return np.where(sd > 1e-12 * sd.max(), sd, 1.0)


def whitening(second):
    """``W`` with ``W^T S W = I`` for a second-moment matrix ``S`` (inverse transposed Cholesky factor).

    A jitter of ``1e-12 trace(S) / d`` keeps a constant or collinear feature
    from breaking the factorization; its coefficient then rests on the
    regression's own ridge (``reg_coef``).
    """
    d = len(second)
    jitter = 1e-12 * (np.trace(second) / d + 1e-300)
    L = np.linalg.cholesky(second + jitter * np.eye(d))
    return np.linalg.inv(L).T
