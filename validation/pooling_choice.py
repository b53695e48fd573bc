"""How much should FedGrEM pool? ``penalty="auto"``, a federated cross-validated choice between its
defaults, a raised floor and full pooling, against each.

On label-skewed digits (``realdata.py``) FedGrEM's defaults trail pooled EM, while FedGrEM with
``penalty=inf`` (every client on the consensus, proportions per client) beats it: SURE
(``penalty="sure-floored"``) sees genuine per-client differences of the diagonal model's local
fits and keeps them, though they cost held-out likelihood. ``penalty="auto"``
(:mod:`fedmm.algorithms.tuning`) deals every client's samples into 5 folds, fits each candidate on each
fold's rest (the defaults; the same with the floor of the paper's schedule at ``C = 8``, which
pools more and still leaves far clients apart; full pooling), and keeps the one that pools least
among those whose held-out log-likelihood per sample, trimmed over clients
(``fedmm.robust.TRIM``), is within one standard error of the best
(``fedmm.robust.one_standard_error``). Cases: digits (IID and
Dirichlet(0.5) clients, 20% of clients contaminated; misclustering on the honest clients' test
sets, as ``realdata.py``), and the paper's GMM and MoR designs with one outlier client (maximum
error over honest clients, as ``paper_designs.py``). For each case it also prints the margin of
the choice (:func:`margin`): how close a call cross-validation made. The measured table is in
``docs/research/realdata.md``.

    python validation/pooling_choice.py [--quick] [--reps N]
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))  # the digits' data and protocol are realdata.py's
import realdata as rd  # noqa: E402
from fedmm import FederatedGaussianMixture, FederatedMixtureRegression  # noqa: E402
from fedmm.methods import gather_options  # noqa: E402
from fedmm.metrics import estimation_errors  # noqa: E402
from fedmm.simulate import make_federated_gmm, make_federated_mor  # noqa: E402
from fedmm.algorithms.tuning import PENALTY_CANDIDATES  # noqa: E402
from fedmm.robust import TRIM, paired_differences  # noqa: E402

SETTINGS = {"defaults": {}, "floor C=8": PENALTY_CANDIDATES[1], "full pooling": PENALTY_CANDIDATES[2],
            "auto": dict(penalty="auto")}


def digits_case(alpha, eps):
    X, labels = rd.digits()

    def case(seed):
        owner = rd.random_owners(labels, 10, alpha, np.random.RandomState(seed))
        rng = np.random.RandomState(seed)
        train, test = rd.train_test(owner, rng)
        X_train, bad = rd.contaminate([X[i] for i in train], eps, rng)
        honest = [k for k in range(len(train)) if k not in bad]

        def make(options):
            return FederatedGaussianMixture(10, n_init=3, random_state=seed, **gather_options(options))

        def error(est):
            return rd.score(labels, test, est.predict([X[i] for i in test]), honest)
        return [X_train], make, error
    return case


def design_case(model, h):
    def case(seed):
        if model == "gmm":
            X, truth = make_federated_gmm(h=h, outlier_clients=[9], random_state=seed)
            parts, estimator = [X], FederatedGaussianMixture
        else:
            X, y, truth = make_federated_mor(h=h, outlier_clients=[9], random_state=seed)
            parts, estimator = [X, y], FederatedMixtureRegression

        def make(options):
            return estimator(5, random_state=seed, **gather_options(options))

        def error(est):
            theta = est.means_ if model == "gmm" else est.coef_
            return estimation_errors(est.weights_, theta, truth.weights, truth.theta)[1][~truth.outliers].max()
        return parts, make, error
    return case


def margin(selection):
    """How many standard errors the chosen candidate's held-out gain over the defaults is, paired over the
    clients its trimmed mean keeps (nan when the defaults are chosen): the one-standard-error rule's margin."""
    scores = selection["client_scores"]
    c = PENALTY_CANDIDATES.index(selection["chosen"])
    if c == 0:
        return np.nan
    mean, se = paired_differences(scores, c, TRIM)
    return -mean[0] / se[0]


def replicate(case, seed):
    """Errors of every setting, the index of the candidate ``penalty="auto"`` chose, its :func:`margin`, and
    the time of its fit over the defaults' (the two timed side by side)."""
    parts, make, error = case(seed)
    fits, seconds = {}, {}
    for name, options in SETTINGS.items():
        start = time.perf_counter()
        fits[name] = make(options).fit(*parts)
        seconds[name] = time.perf_counter() - start
    selection = fits["auto"].penalty_selection_
    return ({name: error(est) for name, est in fits.items()}, PENALTY_CANDIDATES.index(selection["chosen"]),
            margin(selection), seconds["auto"] / seconds["defaults"])


def cases(quick):
    yield "digits, label-skewed, eps=0", digits_case(0.5, 0.0)
    if not quick:
        yield "digits, IID, eps=0", digits_case(None, 0.0)
        yield "digits, label-skewed, eps=0.2", digits_case(0.5, 0.2)
        for h in (0.0, 1.0, 2.0):
            yield f"GMM design, h={h:g}, one outlier", design_case("gmm", h)
    for h in ((2.0,) if quick else (0.0, 2.0)):
        yield f"MoR design, h={h:g}, one outlier", design_case("mor", h)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two cases, one replication")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    reps = 1 if args.quick else args.reps
    warnings.simplefilter("ignore")
    print(f"Mean error over {reps} replications\n")
    print("| case | " + " | ".join(SETTINGS) + " | auto chose (default / C=8 / full) | its margin, min / median "
          "(standard errors) | auto's time / the defaults', median |\n|---|" + "---|" * (len(SETTINGS) + 3))
    for name, case in cases(args.quick):
        rows = [replicate(case, seed) for seed in range(reps)]
        means = " | ".join(f"{np.mean([e[s] for e, _, _, _ in rows]):.4f}" for s in SETTINGS)
        chosen = np.bincount([c for _, c, _, _ in rows], minlength=len(PENALTY_CANDIDATES))
        margins = [m for _, _, m, _ in rows if np.isfinite(m)]
        spread = f"{min(margins):.1f} / {np.median(margins):.1f}" if margins else ""
        cost = np.median([r for _, _, _, r in rows])
        print(f"| {name} | {means} | {' / '.join(map(str, chosen))} | {spread} | {cost:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
