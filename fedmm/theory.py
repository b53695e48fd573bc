"""FedGrEM's error bounds as code (FedGrEM Sec. 3, App. A): terms, conditions, tuning.

The bound of Theorem 3.6 / A.8 has five terms (iterative error, aggregation
rate, cost of heterogeneous mixing proportions, cost of task heterogeneity,
cost of outlier tasks). For Gaussian mixtures (Cor. A.12, with the rates of
Prop. A.11 and A.14) and mixtures of regressions (Cor. A.17, Props. A.16 and
A.19) they read, with ``S`` the number of non-outlier tasks:

    iterative     T^2 kappa0^(T-1) M
    aggregation   R^2 M^3 sqrt(d / (n S)) / c_w
    mixing        [R M sqrt(log(R K / delta) / n) + R^2 M (M^2 + log(R / c_w)) sqrt(1 / n)] / c_w
    heterogeneity min{h, R^2 M^3 sqrt(d / n) / c_w}
    outliers      eps R^2 M^3 sqrt(d / n) / c_w

up to absolute constants, which are parameters here (``constants``, each 1
by default), and with the logarithmic factors written out. The two models
share these forms; they differ in ``kappa0`` and in the conditions
(Assumption A.9 vs A.15). With ``M`` and ``c_w`` bounded this is Cor. 3.9 /
3.12: ``kappa0^T + R^2 sqrt(d / (nK)) + R^2 sqrt(1/n) + min{h, R^2 sqrt(d/n)}
+ eps R^2 sqrt(d/n)``, against the single-task rate ``R^2 sqrt(d/n)``.
"""

from typing import NamedTuple

import numpy as np

from ._assumptions import AssumptionCheck, Condition

__all__ = ["TERMS", "Bound", "bound", "sparse_rate", "sparse_bound",
           "theorem_a8", "localized_radius", "local_rate", "federation_helps", "rates_a11", "kappa0", "theory_C_eta",
           "theory_penalty_params", "check_conditions"]

TERMS = ("iterative", "aggregation", "mixing", "heterogeneity", "outliers")
MODELS = ("gmm", "mor")


class Bound(NamedTuple):
    """The terms of the error bound at one setting.

    Attributes
    ----------
    terms : dict
        Term name -> value (with the constants applied).
    setting : dict
        The arguments the terms were evaluated at.
    """

    terms: dict
    setting: dict

    @property
    def total(self):
        return float(sum(self.terms.values()))

    @property
    def dominant(self):
        """The name of the largest term."""
        return max(self.terms, key=self.terms.get)

    def __str__(self):
        s = self.setting
        head = ", ".join(f"{k}={v:g}" for k, v in s.items() if isinstance(v, (int, float)))
        source = "Thm. A.8" if "Delta" in s else f"Cor. {'A.12' if s['model'] == 'gmm' else 'A.17'}"
        lines = [f"FedGrEM error bound ({s['model'].upper()}, {source}): {head}",
                 f"{'term':<15}{'value':>12}{'share':>9}"]
        for name, value in self.terms.items():
            mark = "  <- dominant" if name == self.dominant else ""
            lines.append(f"{name:<15}{value:>12.4g}{value / self.total:>9.1%}{mark}")
        lines.append(f"{'total':<15}{self.total:>12.4g}")
        lines.append(f"local (single-task) rate R^2 M^3 sqrt(d/n) / c_w: {local_rate(s['n'], s['d'], s['R'], s['M'], s['c_w']):.4g}")
        return "\n".join(lines)


def theorem_a8(model="gmm", *, n, K, d, R, h=0.0, eps=0.0, T=1000, delta=0.05, M=1.0, c_w=1.0, Delta,
               C_b=0.1, kappa0_tilde=0.5, C=1.0):
    """The five terms of Theorem A.8 itself, with the rates ``W``, ``E1``, ``E2`` of Prop. A.11 / A.16.

    With ``k = kappa0_tilde``, ``r_w = C_b c_w / R``, ``r_theta = C_b Delta``,
    ``eta_bar = C_eta R / c_w`` (Cor. A.12 / A.17) and ``WE = W(n, delta/(3RK), r_theta)
    + 2 eta_bar E1(n, delta/(3RK))``:

        iterative     20 T k^(T-1) max(r_w, r_theta)
        aggregation   eta_bar E2(n, |S|, delta/(3R)) / (1 - k/119)
        mixing        W(n, delta/(3RK), r*_{theta,T}) / (1 - k/119)
        heterogeneity 18 / (1 - k/119) min{3h, 6 WE / (1 - k)}
        outliers      30 eps WE / ((1 - k)(1 - k/119))

    where the localized radius ``r*_{theta,T}`` follows the recursion of
    Theorem A.8, ``r*_{theta,t+1} = A_t + 18 / (1 - k/119) W(n, delta/(3RK), r*_{theta,t})``
    from ``r*_{theta,1} = r_theta`` (Sec. 3.2's localization: ``W`` is paid on a
    shrinking ball). Every rate carries the constant ``C``. The theorem needs
    Assumptions A.1-A.7 (``kappa0_tilde < 1`` among them) and ``eps < 1/3``. The
    recursion contracts only when ``18 / (1 - k/119) C R M sqrt(d/n) < 1``
    (``setting["localization_contraction"]``); otherwise the mixing term is
    infinite: the theorem gives no bound at that sample size.

    Returns
    -------
    Bound
    """
    k = kappa0_tilde
    S = K * (1 - eps)
    r_w, r_theta = C_b * c_w / R, C_b * Delta
    eta_bar = theory_C_eta(model, C_b) * R / c_w
    delta_rk = delta / (3 * R * K)

    def W(radius):
        return rates_a11(n, d, R, radius, delta_rk, M=M, c_w=c_w, C=C)["W"]

    E1 = rates_a11(n, d, R, r_theta, delta_rk, M=M, c_w=c_w, C=C)["E1"]
    E2 = rates_a11(n, d, R, r_theta, delta / (3 * R), S=S, M=M, c_w=c_w, C=C)["E2"]
    WE = W(r_theta) + 2 * eta_bar * E1
    heterogeneity = 18 / (1 - k / 119) * min(3 * h, 6 / (1 - k) * WE)
    outliers = 30 / ((1 - k) * (1 - k / 119)) * eps * WE
    aggregation = eta_bar * E2 / (1 - k / 119)
    # W is linear in the radius with slope C R M sqrt(d/n): the localization recursion contracts only when
    # 18 / (1 - k/119) times that slope is below 1 (part of Assumption A.7); otherwise the theorem says nothing.
    contraction = 18 / (1 - k / 119) * C * R * M * np.sqrt(d / n)
    radius = r_theta
    for t in range(1, T if contraction < 1 else 1):  # r*_{theta,t+1} from r*_{theta,t}
        A_t = ((9 * k * (k / 119) ** (t - 1) + 118 / 119 * (t - 1) * k ** (t - 1)) * (r_w + r_theta)
               + aggregation + heterogeneity + outliers)
        radius = A_t + 18 / (1 - k / 119) * W(radius)
    mixing = W(radius) / (1 - k / 119) if contraction < 1 or T == 1 else np.inf
    terms = {"iterative": 20 * T * k ** (T - 1) * max(r_w, r_theta), "aggregation": aggregation,
             "mixing": mixing, "heterogeneity": heterogeneity, "outliers": outliers}
    setting = dict(model=model, n=n, K=K, d=d, R=R, h=h, eps=eps, T=T, delta=delta, M=M, c_w=c_w,
                   kappa0=kappa0_tilde, Delta=Delta, C_b=C_b, localization_contraction=float(contraction))
    return Bound({key: float(v) for key, v in terms.items()}, setting)


def localized_radius(*, n, K, d, R, h=0.0, eps=0.0, T=1000, delta=0.05, M=1.0, c_w=1.0, eta_bar=None,
                     kappa0=0.5, C=1.0):
    """Upper bound on the localized radius ``r*_{theta,T}`` (Prop. A.14 for GMMs, A.19 for MoRs: the same form).

    ``T^2 kappa0^(T-1) M + eta_bar R M^3 sqrt(d/(n S)) + [(eta_bar M) v 1] [R M^2 + R log(R/c_w)] sqrt(1/n)
    + [(eta_bar M) v 1] sqrt(log(RK/delta)/n) + min{h, eta_bar R M^3 sqrt(d/n)}
    + eps eta_bar R M^2 [(eta_bar M) v 1] sqrt(d/n)``, times ``C``; ``eta_bar = R / c_w`` by default
    (the step size of Cor. A.12 / A.17 with ``w_hat >= c_w / R``).
    """
    eta_bar = R / c_w if eta_bar is None else eta_bar
    S = K * (1 - eps)
    big = max(eta_bar * M, 1.0)
    return C * (T ** 2 * kappa0 ** (T - 1) * M + eta_bar * R * M ** 3 * np.sqrt(d / (n * S))
                + big * (R * M ** 2 + R * np.log(R / c_w)) * np.sqrt(1 / n) + big * np.sqrt(np.log(R * K / delta) / n)
                + min(h, eta_bar * R * M ** 3 * np.sqrt(d / n)) + eps * eta_bar * R * M ** 2 * big * np.sqrt(d / n))


def local_rate(n, d, R, M=1.0, c_w=1.0, C=1.0):
    """The single-task rate ``C R^2 M^3 sqrt(d / n) / c_w`` of local EM and gradient EM (Sec. 3.3, after Cor. 3.9)."""
    return C * R ** 2 * M ** 3 * np.sqrt(d / n) / c_w


def bound(model="gmm", *, n, K, d, R, h=0.0, eps=0.0, T=1000, delta=0.05, M=1.0, c_w=1.0, kappa0=0.5,
          constants=None):
    """The five terms of FedGrEM's bound (Cor. A.12 for GMMs, A.17 for MoRs).

    Parameters
    ----------
    model : {"gmm", "mor"}
    n, K, d, R : int
        Samples per task, tasks, dimension, components.
    h, eps : float
        Similarity level and outlier fraction (``S = K (1 - eps)`` non-outlier tasks).
    T : int
        Rounds.
    delta : float
        The bound holds with probability at least ``1 - delta``.
    M, c_w : float
        ``||theta|| <= M`` and ``w >= c_w / R`` (Assumption A.9 (i)).
    kappa0 : float
        Contraction factor of the iterations (Cor. A.12 / A.17 give it up to
        constants; see :func:`kappa0`).
    constants : dict, optional
        Absolute constant of each term (names in ``TERMS``), 1 by default.

    Returns
    -------
    Bound
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}.")
    if not 0 <= eps < 1:
        raise ValueError(f"eps must be in [0, 1), got {eps}.")
    C = {name: 1.0 for name in TERMS}
    unknown = set(constants or {}) - set(TERMS)
    if unknown:
        raise ValueError(f"Unknown constants {sorted(unknown)}; the terms are {TERMS}.")
    C.update(constants or {})
    S = K * (1 - eps)
    local = local_rate(n, d, R, M, c_w)
    terms = {
        "iterative": C["iterative"] * T ** 2 * kappa0 ** (T - 1) * M,
        "aggregation": C["aggregation"] * R ** 2 * M ** 3 * np.sqrt(d / (n * S)) / c_w,
        "mixing": C["mixing"] * (R * M * np.sqrt(np.log(R * K / delta) / n)
                                 + R ** 2 * M * (M ** 2 + np.log(R / c_w)) * np.sqrt(1 / n)) / c_w,
        "heterogeneity": min(h, C["heterogeneity"] * local),
        "outliers": C["outliers"] * eps * local,
    }
    setting = dict(model=model, n=n, K=K, d=d, R=R, h=h, eps=eps, T=T, delta=delta, M=M, c_w=c_w, kappa0=kappa0)
    return Bound({k: float(v) for k, v in terms.items()}, setting)


def sparse_rate(n, d, s, R, M=1.0, c_w=1.0, C=1.0):
    """The sparse single-task rate ``C R^2 M^3 sqrt(s log d / n) / c_w``: :func:`local_rate` with ``d``
    replaced by ``s log d``, ``s`` the coordinates on which the parameters are not zero. Its square,
    ``s log d / n``, is the statistical term of truncated EM (Wang, Gu, Ning & Liu 2015: error
    ``sqrt(s* log d / n)``) and regularized EM (Yi & Caramanis 2015) for a sparse Gaussian mixture.

    It is a worst case over ``s``-sparse parameters: its ``log d`` is paid on coordinates near the detection boundary
    ``sqrt(2 log d / n)`` (the minimax lower bound, Raskutti, Wainwright & Yu 2011, Thm. 1 with ``q = 0``). Where every
    non-zero coordinate is well above it (a beta-min condition), a firm (MCP) threshold selects the support and the
    error is the support oracle's ``sqrt(s / n)``, without ``log d`` (the oracle property, Fan & Li 2001; Zhang 2010):
    ``validation/sparse.py --rate`` measures both (``docs/research/sparse.md``)."""
    return C * R ** 2 * M ** 3 * np.sqrt(s * np.log(d) / n) / c_w


def sparse_bound(model="gmm", *, n, K, d, s, R, h=0.0, eps=0.0, T=1000, delta=0.05, M=1.0, c_w=1.0, kappa0=0.5,
                 constants=None):
    """The terms of :func:`bound` for ``method="sparse-fedgrem"`` (``fedmm.algorithms.sparse``): ``sqrt(d / n)``
    replaced by ``sqrt(s log d / n)`` (:func:`sparse_rate`) in the aggregation term (``n S`` rows pooled),
    the heterogeneity term ``min{h, sparse rate}`` and the outlier term ``eps * sparse rate``; the iterative
    and mixing terms as in Cor. A.12. A conjecture, not a theorem: the FedGrEM paper names sparse parameters
    as an extension (App. D) without a bound; this is Cor. A.12's form with the sparse single-task rate of
    Wang et al. (2015) in place of the dense one, which ``validation/sparse.py`` checks against measurement.
    Arguments as :func:`bound`'s, plus ``s``, the support size (``1 <= s <= d``)."""
    if not 1 <= s <= d:
        raise ValueError(f"s must be in [1, d]; got s={s}, d={d}.")
    dense = bound(model, n=n, K=K, d=d, R=R, h=h, eps=eps, T=T, delta=delta, M=M, c_w=c_w, kappa0=kappa0,
                  constants=constants)
    C = {name: 1.0 for name in TERMS}
    C.update(constants or {})
    S = K * (1 - eps)
    local = sparse_rate(n, d, s, R, M, c_w)
    terms = dict(dense.terms, aggregation=float(C["aggregation"] * sparse_rate(n * S, d, s, R, M, c_w)),
                 heterogeneity=float(min(h, C["heterogeneity"] * local)), outliers=float(C["outliers"] * eps * local))
    return Bound(terms, dict(dense.setting, s=s))


def federation_helps(**setting):
    """Whether FedGrEM's bound (without the iterative term) beats the single-task rate, and the ratio.

    Sec. 3.3, after Cor. 3.9: federation helps when tasks are many (K large),
    similar (``h`` below the local rate) and few are outliers.

    Returns
    -------
    helps : bool
    ratio : float
        ``(bound - iterative term) / local rate``; below 1 means federation helps.
    """
    b = bound(**setting)
    statistical = b.total - b.terms["iterative"]
    ratio = statistical / local_rate(b.setting["n"], b.setting["d"], b.setting["R"], b.setting["M"], b.setting["c_w"])
    return ratio < 1, float(ratio)


def rates_a11(n, d, R, xi, delta, S=1, M=1.0, c_w=1.0, C=1.0):
    """The uniform-convergence rates of Prop. A.11 (GMM; the same for MoR, Prop. A.16).

    ``W(n, delta, xi) = R M xi sqrt(d/n) + (R M^2 + R log(R/c_w)) sqrt(1/n) + sqrt(log(1/delta)/n)``,
    ``E1(n, delta) = R M^3 sqrt(d/n) + R M log(R/c_w) sqrt(1/n) + M sqrt(log(1/delta)/n)``,
    ``E2(n, S, delta) = R M^3 sqrt(d/(n S)) + (R M^3 + R M log(R/c_w)) sqrt(1/n) + M sqrt(log(1/delta)/(n S))``,
    each times ``C``. (The paper's typeset ``sqrt(1/n + sqrt(log(1/delta)/n))`` is read as
    the sum of ``sqrt(1/n)`` and ``sqrt(log(1/delta)/n)`` terms.)

    Returns
    -------
    dict with keys ``W``, ``E1``, ``E2``
    """
    log_r = np.log(R / c_w)
    return {
        "W": C * (R * M * xi * np.sqrt(d / n) + (R * M ** 2 + R * log_r) * np.sqrt(1 / n)
                  + np.sqrt(np.log(1 / delta) / n)),
        "E1": C * (R * M ** 3 * np.sqrt(d / n) + R * M * log_r * np.sqrt(1 / n) + M * np.sqrt(np.log(1 / delta) / n)),
        "E2": C * (R * M ** 3 * np.sqrt(d / (n * S)) + (R * M ** 3 + R * M * log_r) * np.sqrt(1 / n)
                   + M * np.sqrt(np.log(1 / delta) / (n * S))),
    }


def kappa0(model, *, C_b, R, Delta, M=1.0, c_w=1.0, kappa_prime=0.0, C=1.0, C_prime=1.0):
    """The contraction factor of Cor. A.12 (GMM) or A.17 (MoR), with its constants as parameters.

    GMM: ``119 sqrt(2 C_b / (1 + C_b)) + C M^2 c_w^-2 R^3 exp(-C' Delta^2) + C c_w^-2 R^3 exp(-C' Delta^2) + kappa'``.
    MoR: ``119 sqrt(3 C_b / (1 + 2 C_b) + C R^3 c_w^-2 (log Delta)^{3/2} / Delta) + C R^3 c_w^-2 C_b
    + C R^4 c_w^-2 / Delta + kappa'``. With the literal 119 it is below 1 only for tiny ``C_b``:
    the theory's constants are far from sharp.
    """
    if model == "gmm":
        tail = C * R ** 3 * np.exp(-C_prime * Delta ** 2) / c_w ** 2
        return 119 * np.sqrt(2 * C_b / (1 + C_b)) + M ** 2 * tail + tail + kappa_prime
    if model == "mor":
        return (119 * np.sqrt(3 * C_b / (1 + 2 * C_b) + C * R ** 3 * np.log(Delta) ** 1.5 / (Delta * c_w ** 2))
                + C * R ** 3 * C_b / c_w ** 2 + C * R ** 4 / (Delta * c_w ** 2) + kappa_prime)
    raise ValueError(f"model must be one of {MODELS}, got {model!r}.")


def theory_C_eta(model, C_b):
    """``C_eta`` of the theory's step size ``eta = C_eta / w_hat^[0]``: ``1/(1 + C_b)`` (Cor. A.12), ``1/(1 + 2 C_b)`` (A.17)."""
    return 1.0 / (1.0 + (C_b if model == "gmm" else 2 * C_b))


def theory_penalty_params(model, *, n, K, d, R, Delta, C_b=0.1, delta=0.05, M=1.0, c_w=1.0, kappa0_tilde=0.5, C=1.0):
    """Constants of Assumption A.7's penalty recursion, for ``FederatedGaussianMixture(penalty="theory")``.

    ``r_w = C_b c_w / R`` and ``r_theta = C_b Delta`` (Prop. A.11), ``W`` and ``E1``
    at ``(n, delta / (3 R K), r_theta)`` (Prop. A.11), and ``eta_bar = R / c_w``
    times the theory's ``C_eta`` (the step size of Cor. A.12 / A.17 with
    ``w_hat >= c_w / R``). ``kappa0_tilde`` (Assumption A.7's contraction) and
    ``C`` are parameters.
    """
    r_theta = C_b * Delta
    rates = rates_a11(n, d, R, r_theta, delta / (3 * R * K), M=M, c_w=c_w, C=C)
    return {"kappa0": kappa0_tilde, "r_w": C_b * c_w / R, "r_theta": r_theta, "W": rates["W"], "E1": rates["E1"],
            "eta_bar": theory_C_eta(model, C_b) * R / c_w}


def check_conditions(model, weights, theta, n, *, K=None, delta=0.05, init=None, eta=None, C_b=0.1, c=0.5,
                     constants=None):
    """Check Assumption 3.7 / A.9 (GMM) or 3.10 / A.15 (MoR) for a truth and a sample size.

    Parameters
    ----------
    model : {"gmm", "mor"}
    weights : ndarray of shape (K, R)
    theta : ndarray of shape (K, R, d)
        The truth on the non-outlier tasks.
    n : int
        Samples per task.
    init : tuple (weights0, theta0), optional
        Starting values, for condition (ii).
    eta : ndarray of shape (K, R), optional
        Step sizes, for condition (v).
    C_b, c : float
        The initialization radius factor and the step-size constant.
    constants : dict, optional
        Absolute constants of conditions (iii) and (iv): ``"signal"``, ``"sample"`` (1 by default).

    Returns
    -------
    AssumptionCheck
        ``str()`` prints each condition with both sides.
    """
    C = {"signal": 1.0, "sample": 1.0, **(constants or {})}
    weights, theta = np.asarray(weights, float), np.asarray(theta, float)
    K = len(weights) if K is None else K
    R, d = theta.shape[1:]
    c_w = float(R * weights.min())
    M = float(np.linalg.norm(theta, axis=-1).max())
    Delta = float(min(np.linalg.norm(t[:, None] - t[None], axis=-1)[np.triu_indices(R, 1)].min() for t in theta))
    eta_bar = float(np.max(eta)) if eta is not None else theory_C_eta(model, C_b) * R / c_w
    conditions = [Condition("i", "w >= c_w / R and ||theta|| <= M (defines c_w, M)", c_w, 0.0, c_w > 0)]
    if init is not None:
        w0, t0 = (np.asarray(a, float) for a in init)
        w_err, t_err = float(np.abs(w0 - weights).max()), float(np.linalg.norm(t0 - theta, axis=-1).max())
        conditions += [Condition("ii", "max |w0 - w| <= C_b c_w / R", w_err, C_b * c_w / R, w_err <= C_b * c_w / R),
                       Condition("ii", "max ||theta0 - theta|| <= C_b Delta", t_err, C_b * Delta, t_err <= C_b * Delta)]
    if model == "gmm":
        need = C["signal"] * np.log(M * R / c_w)
        conditions.append(Condition("iii", "Delta >= C log(M R / c_w)", Delta, need, Delta >= need))
    else:
        need = C["signal"] * (R ** 3 / c_w + R ** 2 / c_w * max(np.log(Delta), 0.0) ** 1.5)
        conditions.append(Condition("iii", "Delta >= C (R^3 / c_w + R^2 / c_w (log Delta)^{3/2})", Delta, need,
                                    Delta >= need))
    need_n = C["sample"] * (R ** 2 * M ** 6 * d + R ** 2 * np.log(R / c_w) ** 2 * M ** 2
                            + M ** 2 * np.log(R * K / delta)) * eta_bar ** 2 / (C_b ** 2 * Delta ** 2)
    conditions.append(Condition("iv", "n >= C [R^2 M^6 d + R^2 log^2(R/c_w) M^2 + M^2 log(RK/delta)] eta_bar^2 "
                                "/ (C_b^2 Delta^2)", n, need_n, n >= need_n))
    if eta is not None:
        eta = np.asarray(eta, float)
        gap = float(1 - (eta * weights).min())
        conditions += [Condition("v", "1 - min eta w < c", gap, c, gap < c),
                       Condition("v", "max eta w <= 1", float((eta * weights).max()), 1.0, (eta * weights).max() <= 1)]
    name = {"gmm": "3.7 / A.9", "mor": "3.10 / A.15"}[model]
    return AssumptionCheck(name, conditions, {"c_w": c_w, "M": M, "Delta": Delta, "eta_bar": eta_bar, "n": n})
