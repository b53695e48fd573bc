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

The standardization is not robust: an outlier client moves the pooled
moments. For the spherical model and the pooled regression methods that
changes only the floating-point path (their other steps are equivariant under
the maps those standardizations use). For diagonal covariances it changes
the features' relative scale (diagonal, full and tied), hence the metric of
the k-means start and the size of ``reg_covar``; for the other regression methods the whitened
features differ by a rotation, which the coordinate-wise medians of the
alignment do not follow. Either can change a start, not the model.
"""

from typing import NamedTuple

import numpy as np

__all__ = ["Units", "Moments", "pooled_moments", "client_sums", "moments_from_sums"]


class Moments(NamedTuple):
    """Pooled first and second moments of the clients' data (sums sent to the server, divided by ``n``).

    Attributes
    ----------
    mean : ndarray of shape (d,)
    second : ndarray of shape (d, d)
        ``sum_i x_i x_i^T / n`` (uncentered).
    y_mean, y_second : float or None
        ``sum_i y_i / n`` and ``sum_i y_i^2 / n``.
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


def moments_from_sums(sums):
    """The pooled moments from the clients' :func:`client_sums`, added in client order (the server's
    arithmetic, so in-process and remote fits see the same numbers to the last bit)."""
    total = {key: sum(s[key] for s in sums) for key in sums[0]}
    n = total["n"][0]
    y_mean = y_second = None
    if "sum_y" in total:
        y_mean, y_second = float(total["sum_y"][0] / n), float(total["sum_yy"][0] / n)
    return Moments(total["sum_x"] / n, total["sum_xx"] / n, y_mean, y_second)


def pooled_moments(data):
    """The pooled moments: every client's :func:`client_sums`, added by :func:`moments_from_sums`."""
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
