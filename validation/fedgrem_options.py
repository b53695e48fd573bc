"""One of FedGrEM's options against its defaults, paired replication by replication.

The options measured so far (docs/fedgrem.md): ``centre_margins=True`` (every client's component enters the
central problem scaled by how clearly it is nearer its own component's centre than the nearest other one,
:func:`fedmm.algorithms.central.centre_margin`) and ``shrinkage=linear`` (empirical Bayes shrinkage of every client's
component towards the centre, :func:`fedmm.algorithms.central.linear_shrinkage`). Cases: the paper's GMM and MoR
designs with one outlier client (App. B.1; maximum error over the honest clients, as ``pooling_choice.py``),
digits with IID and Dirichlet(0.5) clients, clean and with 10% and 20% of the clients contaminated, and
scikit-learn's wine, breast cancer and iris sets (mis-clustering on the honest clients' test sets, as
``realdata.py``). Each row prints both means and their paired difference with its standard error. The
measured tables are in ``docs/fedgrem.md``.

    python validation/fedgrem_options.py --option centre_margins=True [--quick] [--reps N]
    python validation/fedgrem_options.py --option shrinkage=linear [--quick] [--reps N]
    python validation/fedgrem_options.py --option pooling_sizes=component --option penalty=5 --only "GMM design, h = 1"

``--option`` may be given several times (the options together); ``--only`` runs the cases whose name contains
its text (the small sets get half the replications, as in the full run).
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))  # the data and protocols are realdata.py's and pooling_choice.py's
import realdata as rd  # noqa: E402
from experimental import ExperimentalFedGrEM  # noqa: E402
from fedmm import FederatedGaussianMixture  # noqa: E402
from fedmm.methods import gather_options  # noqa: E402
from pooling_choice import design_case  # noqa: E402


def parse_option(text):
    """``"name=value"`` as ``{name: value}``, the value a bool, a number or a string."""
    name, _, value = text.partition("=")
    literals = {"True": True, "False": False}
    if value in literals:
        return {name: literals[value]}
    try:
        return {name: float(value)}
    except ValueError:
        return {name: value}


def _both(option):
    """The defaults and ``option``, on FedGrEM with the experiments (validation/experimental.py)."""
    return [{"method": ExperimentalFedGrEM(), **options} for options in ({}, option)]


def design_errors(option, model, h, seed):
    parts, make, error = design_case(model, h)(seed)
    return [error(make(options).fit(*parts)) for options in _both(option)]


def split_errors(option, X, labels, n_clients, alpha, eps, seed):
    """Mis-clustering of the honest clients' test sets, defaults and ``option`` (realdata.py's protocol)."""
    R = len(np.unique(labels))
    owner = rd.random_owners(labels, n_clients, alpha, np.random.RandomState(seed))
    X_train, X_test, test, honest = rd.federated_split(X, owner, R, eps, seed)
    return [rd.score(labels, test, FederatedGaussianMixture(R, n_init=3, random_state=seed, **gather_options(options))
                     .fit(X_train).predict(X_test), honest) for options in _both(option)]


def cases(option, quick, reps):
    X, labels = rd.digits()
    for h in ((0.0,) if quick else (0.0, 1.0, 2.0)):
        yield f"GMM design, h = {h:g}", reps, lambda seed, h=h: design_errors(option, "gmm", h, seed)
    for h in ((0.0,) if quick else (0.0, 2.0)):
        yield f"MoR design, h = {h:g}", reps, lambda seed, h=h: design_errors(option, "mor", h, seed)
    for alpha, split in ((0.5, "label-skewed"), (None, "IID")):
        for eps in ((0.0,) if quick else (0.0, 0.1, 0.2)):
            yield (f"digits, {split}, eps = {eps:g}", reps,
                   lambda seed, a=alpha, e=eps: split_errors(option, X, labels, 10, a, e, seed))
    for name, (S, c, K) in rd.small_sets().items():
        for alpha, split in ((0.5, "label-skewed"), (None, "IID")):
            yield (f"{name}, {split}", max(1, reps // 2),
                   lambda seed, S=S, c=c, K=K, a=alpha: split_errors(option, S, c, K, a, 0.0, seed))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--option", required=True, action="append",
                        help="an option against the defaults, as name=value (repeat for several together)")
    parser.add_argument("--only", default=None, help="run only the cases whose name contains this text")
    parser.add_argument("--quick", action="store_true", help="two replications, fewer cases")
    parser.add_argument("--reps", type=int, default=None, help="replications (20; the small sets half as many)")
    args = parser.parse_args(argv)
    option = {k: v for text in args.option for k, v in parse_option(text).items()}
    label = ", ".join(args.option)
    reps = args.reps or (2 if args.quick else 20)
    print(f"| case | replications | defaults | {label} | difference (se) |\n|---|---|---|---|---|")
    start = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, n, run in cases(option, args.quick, reps):
            if args.only and args.only not in name:
                continue
            off, on = np.array([run(seed) for seed in range(n)]).T
            d, se = rd.paired_difference(on, off)
            print(f"| {name} | {n} | {off.mean():.4f} | {on.mean():.4f} | {d:+.4f} ({se:.4f}) |", flush=True)
    print(f"\n{time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
