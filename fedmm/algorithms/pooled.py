"""Pooled baselines: EM and gradient EM on all clients' data as one sample (FedGrEM Sec. 4.1).

Each client sends its responsibility-weighted sums; the server adds them and
takes the M-step (or gradient step) once. Because the sums add up to the
pooled data's sums, this is exactly EM on the pooled data, without moving a
sample. Every client then holds the same parameters, mixing proportions
included: the right model only when all clients are alike.
"""

from ..families import pool_stats
from ._base import Algorithm, em_update, grem_update


class _Pooled(Algorithm):
    per_client = False
    shared = True
    shares_components = True

    def step(self, family, stats, params, n_k):
        pooled = pool_stats(stats)
        n = n_k.sum(keepdims=True)
        return self._update(family, pooled, params.take([0]), n).broadcast(len(n_k))


class PooledEM(_Pooled):
    """EM on the pooled data (``method="pooled-em"``)."""

    def _update(self, family, stats, params, n):
        return em_update(family, stats, n)


class PooledGrEM(_Pooled):
    """Gradient EM on the pooled data (``method="pooled-grem"``)."""

    def _update(self, family, stats, params, n):
        return grem_update(family, stats, params, self.step_sizes(stats, n, self.w0[:1]), n)
