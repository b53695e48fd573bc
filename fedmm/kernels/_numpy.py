"""The numpy backend: each family's reference kernels (:mod:`fedmm.kernels.gaussian`,
:mod:`fedmm.kernels.regression`), the oracle every fast path is tested against, under the names the families call."""

from .gaussian import estep as gaussian_estep, log_resp as gaussian_log_resp, stats as gaussian_stats
from .regression import estep as regression_estep, log_resp as regression_log_resp, stats as regression_stats

__all__ = ["gaussian_estep", "gaussian_log_resp", "gaussian_stats", "regression_estep", "regression_log_resp",
           "regression_stats"]
