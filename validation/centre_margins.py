"""FedGrEM with centre margins (``centre_margins=True``) against its defaults, paired replication by replication.

With centre margins every client's component enters the central problem scaled by its margin, how clearly
its estimate is nearer its own component's centre than the nearest other one
(:func:`fedmm.central.centre_margin`, :meth:`fedmm.algorithms.fedgrem.FedGrEM._with_margins`): a component a
client barely has, drifted onto another component's samples (label-skewed clients), is pooled back onto its
own centre and counts for nothing there. Cases: the paper's GMM and MoR designs with one outlier client
(App. B.1; maximum error over the honest clients, as ``pooling_choice.py``), digits with IID and
Dirichlet(0.5) clients, clean and with 10% and 20% of the clients contaminated, and scikit-learn's wine,
breast cancer and iris sets (mis-clustering on the honest clients' test sets, as ``realdata.py``). Each row
prints both means and their paired difference with its standard error. The measured table is in
``docs/fedgrem.md``.

    python validation/centre_margins.py [--quick] [--reps N]
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))  # the data and protocols are realdata.py's and pooling_choice.py's
import realdata as rd  # noqa: E402
from fedmm import FederatedGaussianMixture  # noqa: E402
from pooling_choice import design_case  # noqa: E402


def design_errors(model, h, seed):
    parts, make, error = design_case(model, h)(seed)
    return [error(make({"centre_margins": m}).fit(*parts)) for m in (False, True)]


def split_errors(X, labels, n_clients, alpha, eps, seed):
    """Mis-clustering of the honest clients' test sets, defaults and centre margins (realdata.py's protocol)."""
    R = len(np.unique(labels))
    owner = rd.random_owners(labels, n_clients, alpha, np.random.RandomState(seed))
    X_train, X_test, test, honest = rd.federated_split(X, owner, R, eps, seed)
    return [rd.score(labels, test, FederatedGaussianMixture(R, n_init=3, random_state=seed, centre_margins=m)
                     .fit(X_train).predict(X_test), honest) for m in (False, True)]


def cases(quick, reps):
    X, labels = rd.digits()
    for h in ((0.0,) if quick else (0.0, 1.0, 2.0)):
        yield f"GMM design, h = {h:g}", reps, lambda seed, h=h: design_errors("gmm", h, seed)
    for h in ((0.0,) if quick else (0.0, 2.0)):
        yield f"MoR design, h = {h:g}", reps, lambda seed, h=h: design_errors("mor", h, seed)
    for alpha, split in ((0.5, "label-skewed"), (None, "IID")):
        for eps in ((0.0,) if quick else (0.0, 0.1, 0.2)):
            yield (f"digits, {split}, eps = {eps:g}", reps,
                   lambda seed, a=alpha, e=eps: split_errors(X, labels, 10, a, e, seed))
    for name, (S, c, K) in rd.small_sets().items():
        for alpha, split in ((0.5, "label-skewed"), (None, "IID")):
            yield (f"{name}, {split}", max(1, reps // 2),
                   lambda seed, S=S, c=c, K=K, a=alpha: split_errors(S, c, K, a, 0.0, seed))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two replications, fewer cases")
    parser.add_argument("--reps", type=int, default=None, help="replications (20; the small sets half as many)")
    args = parser.parse_args(argv)
    reps = args.reps or (2 if args.quick else 20)
    print("| case | replications | defaults | centre margins | difference (se) |\n|---|---|---|---|---|")
    start = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, n, run in cases(args.quick, reps):
            off, on = np.array([run(seed) for seed in range(n)]).T
            d = on - off
            se = d.std(ddof=1) / np.sqrt(n) if n > 1 else np.nan
            print(f"| {name} | {n} | {off.mean():.4f} | {on.mean():.4f} | {d.mean():+.4f} ({se:.4f}) |", flush=True)
    print(f"\n{time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
