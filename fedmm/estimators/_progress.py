"""What a private fit prints as it runs."""

import time

from ..engine import Progress

__all__ = ["PrivateProgress"]


class PrivateProgress(Progress):
    """What a private fit prints (``verbose``): each stage's calibrated rounds and time, and at the end the
    rounds and the privacy spent; no log-likelihood, which its clients do not release."""

    def round(self, t, record):
        if self.verbose >= 2 and t % self.interval == 0:
            self._print(f"  {self.label}, round {t}: " + ", ".join(f"{k} {v:.6g}" for k, v in record.items()
                                                                   if k != "log_likelihood"))

    def end(self, t, converged, loglik_per_sample):
        if self.verbose >= 1:
            self._print(f"{self.label}: {t} rounds ({time.perf_counter() - self._since:.2f} s)")

    def summary(self, n_iter, spent, budget):
        if self.verbose >= 1:
            self._print(f"private fit: {n_iter} rounds, the number its noise was calibrated for (no stopping rule: "
                        f"converged_ is False), spent epsilon {spent[0]:.4g} of {budget[0]:g} at delta "
                        f"{spent[1]:g}; log-likelihoods are not released")
