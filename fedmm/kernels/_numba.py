"""The Numba backend: each family's compiled kernels (:mod:`fedmm.kernels.gaussian`,
:mod:`fedmm.kernels.regression`; what they share: :mod:`fedmm.kernels._compiled`), one fused, parallel pass over
the samples per round, under the names the families call. Same arguments and results as the numpy reference; the
regression family's statistics at given responsibilities (starts only) are the reference's."""

from .gaussian import numba_estep as gaussian_estep, numba_log_resp as gaussian_log_resp, numba_stats as gaussian_stats
from .regression import numba_estep as regression_estep, numba_log_resp as regression_log_resp
from .regression import stats as regression_stats

__all__ = ["gaussian_estep", "gaussian_log_resp", "gaussian_stats", "regression_estep", "regression_log_resp",
           "regression_stats"]
