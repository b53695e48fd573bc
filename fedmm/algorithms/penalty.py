"""FedGrEM's penalty ``lambda_t`` (FedGrEM Sec. 2.3, App. B.1): its schedules, SURE's choice made to settle,
and the scale at which runs are compared (:class:`fedmm.algorithms.fedgrem.FedGrEM`)."""

from numbers import Real

import numpy as np

PENALTIES = ("paper", "sure", "sure-floored", "theory")
#: The penalties chosen every round by SURE (:func:`fedmm.algorithms.tuning.sure_penalty`).
SURE_PENALTIES = ("sure", "sure-floored")


def _checked_penalty(lam, t):
    """A user's ``penalty(t)``: a number >= 0 (``inf`` pools everything), else a ``ValueError``."""
    if not isinstance(lam, Real) or isinstance(lam, bool) or not lam >= 0:
        raise ValueError(f"The penalty function returned {lam!r} for round t={t}; it must return a number >= 0 "
                         "(inf pools every client).")
    return float(lam)


def penalty_schedule(penalty, penalty_params, p, K, n):
    """``t -> lambda_t`` for ``t = 1, 2, ...``.

    - ``"paper"`` (App. B.1): ``lambda_0 = 1``, ``lambda_t = kappa lambda_{t-1} + C sqrt(p + log K)``
      with ``kappa = 0.1``, ``C = 2`` (override with ``penalty_params``: ``lambda0``, ``kappa``, ``C``);
    - ``"sure"``: chosen every round from the data (:func:`fedmm.algorithms.tuning.sure_penalty`, in
      :meth:`fedmm.algorithms.fedgrem.FedGrEM.server_step`); the schedule is then the paper's, used for the
      first round's pilot;
    - ``"sure-floored"``: SURE's choice, never below the paper's ``lambda_t`` (never less pooling than
      the paper's schedule; ``docs/units.md``);
    - ``"theory"`` (App. A, Assumption A.7): ``lambda_0 = (15/119) sqrt(n) (r_w + r_theta)``,
      ``lambda_t = kappa0 lambda_{t-1} + 15 sqrt(n) (W + 2 eta_bar E1)``, with every constant
      (``kappa0``, ``r_w``, ``r_theta``, ``W``, ``E1``, ``eta_bar``) given in ``penalty_params``
      (they involve unknown absolute constants; ``n`` is the mean client size);
    - a number: constant ``lambda`` (``inf`` pools everything: gradient FedEM);
    - a callable: ``lambda_t = penalty(t)``.
    """
    params = dict(penalty_params or {})
    if callable(penalty):
        return lambda t: _checked_penalty(penalty(t), t)
    if isinstance(penalty, Real) and not isinstance(penalty, bool):
        if penalty < 0:
            raise ValueError(f"A constant penalty must be >= 0, got {penalty}.")
        return lambda t: float(penalty)
    if penalty in ("paper", *SURE_PENALTIES):
        lam0, kappa = params.pop("lambda0", 1.0), params.pop("kappa", 0.1)
        increment = params.pop("C", 2.0) * np.sqrt(p + np.log(K))
    elif penalty == "theory":
        needed = ("kappa0", "r_w", "r_theta", "W", "E1", "eta_bar")
        missing = [k for k in needed if k not in params]
        if missing:
            raise ValueError(f"penalty='theory' needs penalty_params with {list(needed)}; missing {missing}. "
                             "(fedmm.theory computes them for the GMM and MoR examples.)")
        kappa = params.pop("kappa0")
        lam0 = 15.0 / 119.0 * np.sqrt(n) * (params.pop("r_w") + params.pop("r_theta"))
        increment = 15.0 * np.sqrt(n) * (params.pop("W") + 2.0 * params.pop("eta_bar") * params.pop("E1"))
    else:
        raise ValueError(f"penalty must be one of {PENALTIES} (or 'auto' in the estimators), a number >= 0 or a "
                         f"callable of t; got {penalty!r}.")
    if params:
        raise ValueError(f"Unknown penalty_params for penalty={penalty!r}: {sorted(params)}.")
    # lambda_t = kappa^t lambda_0 + increment (1 - kappa^t) / (1 - kappa), the recursion unrolled.
    return lambda t: kappa ** t * lam0 + increment * (t if kappa == 1 else (1 - kappa ** t) / (1 - kappa))


def objective_scale(lam, lam_objective):
    """``lambda_objective / lambda`` (1 when they are equal, also at 0 or infinity)."""
    return 1.0 if lam == lam_objective else lam_objective / lam


def settle_penalty(chosen, pilot, memory):
    """SURE's choice ``chosen`` made to settle: ``(lambda, memory)``, ``memory`` being ``(the penalties three
    and two rounds back, the settled floor)`` (``(nan, nan, 0)`` before the first round); ``pilot`` is last
    round's.

    With many clients SURE's choice can alternate between two grid values every round: at one, the
    clients' distances favour the other (the paper's design with 300 clients of 50 samples, a tenth of
    them outliers: 19.95 and 31.62 in turn, and FedGrEM never converged in 500 rounds). Once the choices
    have gone ``A, B, A, B``, ``lambda`` stays at least the larger of the two from then on: it may still
    rise, never fall below, so the run settles. A single return (``A, B, A``) is left alone: on the
    paper's GMM design it happens on the way to convergence, and flooring it moved a fit.
    """
    before_last, before, settled = memory
    if chosen == before and pilot == before_last and chosen != pilot:
        settled = max(settled, chosen, pilot)
    return max(chosen, settled), (before, pilot, settled)
