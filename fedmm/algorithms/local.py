"""Single-task baselines: local EM and local gradient EM (FedGrEM Sec. 4.1).

Nothing crosses the client/server boundary: every client runs its own
algorithm on its own data, which is the single-task rate ``R^2 sqrt(d / n)``
that federation has to beat (Sec. 3.3, after Cor. 3.9).
"""

from ._base import Algorithm, em_update, grem_update


class LocalEM(Algorithm):
    """Local EM: E-step and closed-form M-step on each client (``method="local-em"``)."""

    def step(self, family, stats, params, n_k):
        return em_update(family, stats, n_k)


class LocalGrEM(Algorithm):
    """Local gradient EM: E-step and one gradient M-step on each client (``method="local-grem"``)."""

    def step(self, family, stats, params, n_k):
        return grem_update(family, stats, params, self.step_sizes(stats, n_k), n_k)
