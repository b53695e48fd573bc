"""FedGrEM's variances on the server (fedmm's, beyond the paper's identity covariances): the noise units the
central problem is solved in, and the clients' variances pooled where their means are
(:class:`fedmm.algorithms.fedgrem.FedGrEM`, ``pool_variances``)."""

import numpy as np
from numba import vectorize

from ..reductions import fill_empty_medians, largest_magnitudes
from ..robust import client_median
from .central import central_update

#: A component with fewer rows than this (``N_kr``, its responsibilities' sum) holds none: its variance from them
#: is the guard's (:meth:`fedmm.families.GaussianFamily.update_scale` divides by ``N_kr`` plus ten machine
#: epsilons, which with no rows leaves the squared mean), not an estimate.
EMPTY_ROWS = 1e-8


def noise_scale(scale, empty=None):
    """``sigma_r``, the noise scale of every component (R, s): the root of the clients' median variance.

    The central problem (Algorithm 1) is stated for unit-variance noise: its
    quadratic ``n_k/2 ||nu_k - theta_k||^2`` is the information in ``n_k``
    unit-variance samples, and its threshold ``lambda / sqrt(n_k)`` a number of
    noise standard deviations. With estimated variances fedmm solves it on
    ``theta / sigma_r`` (per coordinate for diagonal covariances), i.e. with
    threshold ``lambda sigma_r / sqrt(n_k)`` in the data's units, which makes
    the pooling decision independent of the data's units and leaves the
    paper's problem unchanged when ``sigma_r = 1``. The median over clients
    keeps an outlier client's variances from setting the unit.

    With ``empty`` (K, R), the components the clients hold no rows of (:func:`empty_components`), each counts at
    its client's median variance over the components it holds (:func:`held_variances`).
    """
    return np.sqrt(client_median(scale if empty is None else held_variances(scale, empty)))


def empty_components(n_k, weights):
    """(K, R) bool: the components each client holds no rows of, ``n_k w_kr`` below :data:`EMPTY_ROWS` (its claimed
    size and proportions: a party that lies about them decides only its own components)."""
    return n_k[:, None] * weights < EMPTY_ROWS


def held_variances(scale, empty):
    """The clients' variances (K, R, s) with each ``empty`` component's (:func:`empty_components`) replaced by its
    client's median over the components it holds rows of.

    A client without rows in a component has no estimate of its variance: its M-step returns the squared mean
    (:data:`EMPTY_ROWS`), which follows where the server last put the mean. Counted in the median over clients, it
    made the noise units follow the pooling decisions they decide: where two clients of three held a component on
    no rows (an outlier client at a third of the federation), the units of that component flipped with the pooled
    set, and the rounds alternated between two pooled sets until ``max_iter``. The client's typical variance is
    what its rows say about a component's spread; the median over the clients holding rows alone, also tried, lets
    the few holders of a rare component set its unit, and was worse (``docs/research/performance.md``).
    """
    if not empty.any():
        return scale
    scale = np.array(np.broadcast_to(scale, empty.shape + scale.shape[-1:]), dtype=float)
    fill_empty_medians(scale, empty)
    return scale


def pool_variances(scale, N, share):
    """The variances shrunk towards the pooled variance as far as the means were shrunk towards the centre.

    Client ``k`` holds ``scale_kr``, the maximizer of its Q-hat at ``nu_kr``
    (``RSS_kr / N_kr``). The central update's solution is
    ``nu_kr = s_kr nu_bar_r + (1 - s_kr) theta_tilde_kr`` with the share
    ``s_kr = min(1, threshold_kr / ||theta_tilde_kr - nu_bar_r||)``, 1 when
    pooled (:func:`fedmm.algorithms.central.pooling_share`). The variances follow the
    same rule: ``scale_kr <- s_kr scale_bar_r + (1 - s_kr) scale_kr``, where
    ``scale_bar_r = sum_k a_kr N_kr scale_kr / sum_k a_kr N_kr`` with
    ``a_kr = clip(2 s_kr - 1, 0, 1)`` is the pooled M-step's variance at the
    common mean over the pooled clients (``a = 1``; with every client pooled,
    pooled EM's), fading out those up to twice the threshold away
    (``s >= 1/2``). Pooled components take it; unpooled ones move towards it;
    clients beyond twice the threshold do not enter it, so an outlier's
    variance (unbounded, unlike its mean's pull on the centre, which the
    threshold bounds) cannot inflate it; far ones keep nearly their own.

    Every step is continuous in the clients' estimates, which the iteration
    needs: a hard switch between own and pooled variance at the threshold
    made a client there flip between the two every round (found with 3,000
    clients), and so did a pooled average that a client entered in full when
    it crossed the threshold (sklearn's digits, 20 clients of 90 samples,
    ``R = 10``: the pooled variance jumped by the client's ``N_kr / sum N``,
    a fifth, and FedGrEM met ``max_iter`` in all three passes; with the fade,
    84 rounds in all). Clients send ``N_kr scale_kr`` and ``N_kr``
    (``n_k w_kr``): parameters and sizes, no data.

    A variance is a claim too (``docs/threat-model.md``): a party whose mean sits on the centre could
    send a variance a hundred times its data's and inflate every pooled one. So a client enters the
    pooled variance only as far as its variances are typical (:func:`_typical`): in full within a
    factor :data:`VARIANCE_RANGE` of the median client's, not at all beyond its square, continuously
    between.
    """
    weight = N * np.clip(2.0 * share - 1.0, 0.0, 1.0) * _typical(scale)          # (K, R)
    total = weight.sum(axis=0)
    # Fractions first: a nearly empty component's N of 1e-300 times a variance would underflow to 0.
    fraction = weight / np.where(total > 0, total, 1.0)
    pooled = np.einsum("kr,krs->rs", fraction, scale)
    # Where no client enters the pooled variance, every client keeps its own.
    return _towards(scale, pooled, np.where(total > 0, share, 0.0)[..., None])


#: How far (a factor) a client's variance may lie from the median client's and still enter the pooled
#: variance in full (:func:`pool_variances`); beyond its square it does not enter.
VARIANCE_RANGE = 4.0


def _typical(scale):
    """(K, R) how far each client's variances of a component enter the pooled one: 1 where every coordinate is
    within a factor ``VARIANCE_RANGE`` of the median client's, 0 where one is beyond its square, log-linear
    between. Ratios, so the same in any units."""
    with np.errstate(divide="ignore"):
        ratio = scale / client_median(scale)
        far = largest_magnitudes(np.log(ratio, out=ratio)) / np.log(VARIANCE_RANGE)   # one (K, R, s) array, not two
    return np.clip(2.0 - far, 0.0, 1.0)


@vectorize(cache=True)
def _towards(own, pooled, share):
    """``own + share (pooled - own)``, exact at both ends: a pooled component (``share = 1``) gets the pooled
    variance, an unmoved one its own. One compiled pass over the (K, R, s) variances (docs/performance.md)."""
    if share == 1.0:
        return pooled
    if share == 0.0:
        return own
    return (pooled - own) * share + own


def robust_scale(family, scale, sizes, lam, n_features, **solver):
    """The variances' own robust central update (``pool_variances="robust"``; fedmm's, beyond the paper).

    FedGrEM's central problem (Algorithm 1, :func:`fedmm.algorithms.central.central_update`) solved on
    ``v_kr = family.log_scale(Sigma_kr)``, log-variances scaled so that each coordinate's sampling sd is
    about ``1 / sqrt(N_kr)``: the role the noise units play for the means. For full covariances the
    distance is ``||log Sigma_kr - log Sigma_bar_r||_F / sqrt(2)``, the log-Euclidean metric: a client
    within ``lambda / sqrt(size)`` of the consensus takes it, a far one (an outlier's variances) keeps
    all but that distance. Variances one per client (tied, shared noise) form one group per client.

    Returns
    -------
    scale : ndarray of shape (K, R, s)
    pooled : ndarray of shape (K, R), bool
        Whose variances sit on the consensus.
    """
    per_component = family.scale_per_component
    own = scale if per_component else scale[:, :1]
    central = central_update(family.log_scale(own, n_features), sizes if per_component else sizes[:, None], lam,
                             **solver)
    pooled_scale = family.exp_scale(central.nu, n_features)
    R = scale.shape[1]
    return np.broadcast_to(pooled_scale, scale.shape).copy(), np.broadcast_to(central.pooled, (len(scale), R)).copy()
