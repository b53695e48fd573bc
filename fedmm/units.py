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

from .robust import trusted_sizes

__all__ = ["Units", "Moments", "pooled_moments", "client_sums", "moments_from_sums", "client_distances",
           "far_from_others"]


class Moments(NamedTuple):
    """Pooled first and second moments of the clients' data (:func:`moments_from_sums`, from the clients' sums).

    Attributes
    ----------
    mean : ndarray of shape (d,)
    second : ndarray of shape (d, d)
        ``sum_i x_i x_i^T / n`` (uncentered).
    y_mean, y_second : float or None
        The same for the responses.
    """

    mean: np.ndarray
    second: np.ndarray
    y_mean: float | None
    y_second: float | None


#: Rows of float32 data converted to float64 at a time for the moments.
_CHUNK = 65536


def client_sums(data):
    """One client's sums ``{"n", "sum_x", "sum_xx"[, "sum_y", "sum_yy"]}``: what it sends for the moments.

    Accumulated in float64 also for float32 data (in chunks, not a float64 copy): the variance
    ``sum_xx / n - mean^2`` cancels, and float32 sums of a million rows far from 0 would leave noise.
    """
    sum_x, sum_xx = 0.0, 0.0
    for start in range(0, len(data.X), _CHUNK):
        X = data.X[start:start + _CHUNK].astype(np.float64, copy=False)
        sum_x, sum_xx = sum_x + X.sum(axis=0), sum_xx + X.T @ X
    sums = {"n": np.array([float(len(data.X))]), "sum_x": sum_x, "sum_xx": sum_xx}
    if data.y is not None:
        sums.update(sum_y=np.array([data.y.sum()]), sum_yy=np.array([data.y @ data.y]))
    return sums


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
    the pooled ones to the last bit: an honest federation's standardization is unchanged. Added in client
    order, so in-process and remote fits see the same numbers.
    """
    n = np.array([s["n"][0] for s in sums])
    weight = np.clip(2.0 - client_distances(sums) / UNITS_RANGE, 0.0, 1.0) * (trusted_sizes(n) / n)
    total = {key: sum(w * s[key] for w, s in zip(weight, sums)) for key in sums[0]}
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
    n = np.array([s["n"][0] for s in sums])
    distance = _distances(np.stack([s["sum_x"] for s in sums]) / n[:, None],
                          np.stack([np.diag(s["sum_xx"]) for s in sums]) / n[:, None])
    if "sum_y" in sums[0]:
        distance = np.maximum(distance, _distances(np.array([s["sum_y"] for s in sums]) / n[:, None],
                                                   np.array([s["sum_yy"] for s in sums]) / n[:, None]))
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
    """The moments of in-process clients: every client's :func:`client_sums`, combined by :func:`moments_from_sums`."""
    return moments_from_sums([client_sums(data.client_data(k)) for k in range(data.n_clients)])


class Units(NamedTuple):
    """An affine change of units: ``z = (x - x_shift) @ x_map``, ``y_std = (y - y_shift) / y_scale``.

    Attributes
    ----------
    x_shift : ndarray of shape (d,)
    x_map : ndarray of shape (d, d)
        Invertible; diagonal for the Gaussian family.
    y_shift, y_scale : float
    """

    x_shift: np.ndarray
    x_map: np.ndarray
    y_shift: float = 0.0
    y_scale: float = 1.0

    @classmethod
    def identity(cls, d):
        return cls(np.zeros(d), np.eye(d))

    def transform(self, data):
        """The data in standard units (same clients and order); the data themselves when nothing changes.

        Computed in the data's own precision, so float32 data stay float32 (:class:`fedmm.data.FederatedData`).
        """
        diagonal, dtype = np.diag(self.x_map), data.X.dtype
        if np.array_equal(self.x_map, np.diag(diagonal)):
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
