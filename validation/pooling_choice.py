"""Should FedGrEM pool everything? A federated held-out choice between its defaults and full pooling.

On label-skewed digits (``realdata.py``) FedGrEM's defaults trail pooled EM, while FedGrEM with
``penalty=inf`` (every client on the consensus, proportions per client) beats it: SURE
(``penalty="sure-floored"``) sees genuine per-client differences of the diagonal model's local
fits and keeps them, though they cost held-out likelihood. This study measures a candidate
rule, not yet fedmm's: every client holds out 20% of its training samples, both settings are
fitted on the rest, each client reports its mean held-out log-likelihood per sample, and full
pooling is chosen only when its trimmed mean over clients (``fedmm.tuning.TRIM``) beats the
defaults' by more than one standard error (``fedmm.tuning.one_standard_error``, the side of less
pooling); the plain argmax is printed too. Cases: digits (IID and Dirichlet(0.5) clients, 20% of
clients contaminated; misclustering on the honest clients' test sets, as ``realdata.py``), and
the paper's GMM and MoR designs with one outlier client (maximum error over honest clients, as
``paper_designs.py``). The measured table, and why the rule is not fedmm's default (one MoR fit of
20 at ``h = 2`` pools and fails), are in ``docs/realdata.md``.

    python validation/pooling_choice.py [--quick] [--reps N]
"""

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))  # the digits' data and protocol are realdata.py's
import realdata as rd  # noqa: E402
from fedmm import FederatedGaussianMixture, FederatedMixtureRegression  # noqa: E402
from fedmm.data import FederatedData  # noqa: E402
from fedmm.metrics import estimation_errors  # noqa: E402
from fedmm.simulate import make_federated_gmm, make_federated_mor  # noqa: E402
from fedmm.tuning import TRIM, holdout_split, one_standard_error, trimmed_mean  # noqa: E402

SETTINGS = {"defaults": {}, "full pooling": dict(penalty=np.inf)}


def holdout_parts(parts, rng):
    """Every client's arrays (features, and responses) split 80/20 at random, as ``penalty="auto"`` splits
    them (:func:`fedmm.tuning.holdout_split`): ``(train, held_out)``, each a list of parts."""
    data = FederatedData.from_input(*parts)
    return [[d.split(a) for a in (d.X, d.y) if a is not None] for d in holdout_split(data, 0.2, rng)]


def digits_case(alpha, eps):
    X, labels = rd.digits()

    def case(seed):
        owner = rd.random_owners(labels, 10, alpha, np.random.RandomState(seed))
        rng = np.random.RandomState(seed)
        train, test = rd.train_test(owner, rng)
        X_train, bad = rd.contaminate([X[i] for i in train], eps, rng)
        honest = [k for k in range(len(train)) if k not in bad]

        def make(options):
            return FederatedGaussianMixture(10, n_init=3, random_state=seed, **options)

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
            return estimator(5, random_state=seed, **options)

        def error(est):
            theta = est.means_ if model == "gmm" else est.coef_
            return estimation_errors(est.weights_, theta, truth.weights, truth.theta)[1][~truth.outliers].max()
        return parts, make, error
    return case


def replicate(case, seed):
    """Errors of both settings, and which one the held-out rule picks (plain argmax, one standard error)."""
    parts, make, error = case(seed)
    errors = {name: error(make(options).fit(*parts)) for name, options in SETTINGS.items()}
    train, held = holdout_parts(parts, np.random.RandomState(1000 + seed))
    scores = np.array([[s.mean() for s in make(options).fit(*train).score_samples(*held)]
                       for options in SETTINGS.values()])       # (settings, clients): defaults first
    plain = int(trimmed_mean(scores[1], TRIM) > trimmed_mean(scores[0], TRIM))
    return errors, plain, one_standard_error(scores, TRIM)


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
    parser.add_argument("--quick", action="store_true", help="two cases, two replications")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    reps = 2 if args.quick else args.reps
    warnings.simplefilter("ignore")
    print("| case | defaults | full pooling | held-out, 1 SE | pooled (of reps) | held-out, argmax | pooled |")
    print("|---|---|---|---|---|---|---|")
    for name, case in cases(args.quick):
        rows = [replicate(case, seed) for seed in range(reps)]
        err = np.array([[e["defaults"], e["full pooling"]] for e, _, _ in rows])
        plain = np.array([p for _, p, _ in rows])
        se = np.array([s for _, _, s in rows])
        pick = np.arange(reps)
        print(f"| {name} | {err[:, 0].mean():.4f} | {err[:, 1].mean():.4f} | {err[pick, se].mean():.4f} | "
              f"{se.sum()} | {err[pick, plain].mean():.4f} | {plain.sum()} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
