"""Every client against itself alone (issue 61): grouped federations where groups differ in some components only,
a small minority group, several close groups, groups of regressions, and one client far from the others.

Generators of this script's own (not :func:`fedmm.simulate.make_grouped_gmm`): 12 clients, R = 3 components in
R^5 with 100 rows each (the regressions: R = 2 in R^3, 200 rows), every client's parameters its group's moved by
``h = 0.1`` in a random direction, proportions ``Dirichlet(5)``. The shapes:

- ``shared``: two groups of 6 that share two of the three components; the third is 4 apart;
- ``9 + 3``: a majority of 9 and a minority of 3 whose every component is 1.5 from the majority's;
- ``4 x 3``: four groups of 3, each group's components 2 from a common base;
- ``regressions``: two groups of 6, every coefficient vector 2 apart;
- ``far``: 9 clients of the base and a tenth whose three means are all 6 from it (1-2 of its components used
  to pool onto other components of the centre: :meth:`fedmm.algorithms.fedgrem.FedGrEM.own_fits`);
- the smallest federations: ``3 + 1``, three clients of the base and one 2 from it; ``2 + 1`` and ``2 + 1 close``,
  two clients of the base and one 6 or 2 from it (one client in three: the theory's limit, ``eps <= 1/3``).

Error: per client, the mean over components of ``||theta_hat_r - theta_r||`` under the client's best label match.
Local EM (``n_init=10``) is each client's reference; the oracle is FedEM on each true group's rows, started at
the truth. Per method: the mean over clients of the ratio of errors to local EM's (averaged over seeds), the worst
client's ratio (each client's error averaged over seeds, over its local EM's), and the oracle's ratio.

Targets (issue 61): FedGrEM and FedeRiCo at most 1.0x local EM's mean error on every shape, no client above 1.5x;
FedGrEM within 1.5x the oracle where groups share components. Exits non-zero when one is missed, but on the
three-client shapes (:data:`REPORTED`), whose misses are reported, not checked.

    python validation/every_client.py [--quick] [--seeds N] [--jobs N] [--methods NAME ...] [--shapes NAME ...]
"""

import argparse
import sys
import warnings

import numpy as np
from joblib import Parallel, delayed

from fedmm import FederatedGaussianMixture, FederatedMixtureRegression
from fedmm.metrics import best_permutation

METHODS = {"FedGrEM": "fedgrem", "FedeRiCo": "federico", "FedEM": "fedem"}
ORACLE = "oracle"
#: The methods the targets are for, the most a client's error may be over its local EM's (on average and at the
#: worst client), and FedGrEM's most over the oracle where groups share components.
ADAPTIVE, AT_MOST, WORST, OVER_ORACLE = ("FedGrEM", "FedeRiCo"), 1.0, 1.5, 1.5
#: Group sizes and how far each group's moved components are from the base (the first group keeps the base).
SHAPES = {"shared": dict(sizes=(6, 6), gap=4.0, moved=[2]),
          "9 + 3": dict(sizes=(9, 3), gap=1.5),
          "4 x 3": dict(sizes=(3, 3, 3, 3), gap=2.0),
          "regressions": dict(sizes=(6, 6), gap=2.0, regression=True),
          "far": dict(sizes=(9, 1), gap=6.0),
          "3 + 1": dict(sizes=(3, 1), gap=2.0),
          "2 + 1": dict(sizes=(2, 1), gap=6.0),
          "2 + 1 close": dict(sizes=(2, 1), gap=2.0)}
#: Shapes whose misses are reported, not checked: three clients, where the far client's unpooled components carry the
#: soft threshold's pull towards the centre, and one client's rows can place a component's centre
#: (``docs/research/every-client.md``).
REPORTED = ("2 + 1", "2 + 1 close")
BASE_GMM = 3.0 * np.array([[1.0, 0, 0, 0, 0], [-0.5, 0.866, 0, 0, 0], [-0.5, -0.866, 0, 0, 0]])
BASE_MOR = np.array([[2.0, 0.0, 1.0], [-2.0, 1.0, 0.0]])
H = 0.1


def _unit(rng, shape):
    z = rng.standard_normal(shape)
    return z / np.linalg.norm(z, axis=-1, keepdims=True)


def federation(shape, seed):
    """``(X, y or None, theta (K, R, p), weights (K, R), groups (K,))`` for one of :data:`SHAPES`."""
    spec = SHAPES[shape]
    regression = spec.get("regression", False)
    base = BASE_MOR if regression else BASE_GMM
    rng = np.random.RandomState(seed)
    R, p = base.shape
    moved = spec.get("moved", list(range(R)))
    centers = np.repeat(base[None], len(spec["sizes"]), axis=0)
    centers[1:, moved] += spec["gap"] * _unit(rng, (len(spec["sizes"]) - 1, len(moved), p))
    groups = np.repeat(np.arange(len(spec["sizes"])), spec["sizes"])
    theta = centers[groups] + H * _unit(rng, (len(groups), R, p))
    weights = rng.dirichlet(np.full(R, 5.0), size=len(groups))
    n = 200 if regression else 100
    labels = [rng.choice(R, size=n, p=w) for w in weights]
    if regression:
        X = [rng.standard_normal((n, p)) for _ in groups]
        y = [np.einsum("ij,ij->i", x, theta[k, lab]) + rng.standard_normal(n) for k, (x, lab) in
             enumerate(zip(X, labels))]
        return X, y, theta, weights, groups
    return [theta[k, lab] + rng.standard_normal((n, p)) for k, lab in enumerate(labels)], None, theta, weights, groups


def component_errors(theta_hat, theta):
    """Per client (K,): the mean over components of the error under the client's best label match
    (:func:`fedmm.metrics.best_permutation`, App. C.2)."""
    return np.array([np.linalg.norm(a[best_permutation(a, b)] - b, axis=-1).mean() for a, b in zip(theta_hat, theta)])


def _estimator(y, R, seed, **options):
    if y is None:
        return FederatedGaussianMixture(R, covariance_type="spherical", random_state=seed, **options)
    return FederatedMixtureRegression(R, random_state=seed, **options)


def _theta(fit):
    return fit.coef_ if hasattr(fit, "coef_") else fit.means_


def one_fit(shape, seed, names):
    """{name: per-client errors (K,)} on one federation, for local EM, ``names`` and the oracle."""
    X, y, theta, weights, groups = federation(shape, seed)
    R = theta.shape[1]
    data = (X,) if y is None else (X, y)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits = {"local EM": _estimator(y, R, seed, method="local-em", n_init=10).fit(*data)}
        for name in names:
            fits[name] = _estimator(y, R, seed, method=METHODS[name]).fit(*data)
        oracle = np.empty_like(theta)
        for g in np.unique(groups):
            members = np.flatnonzero(groups == g)
            init = {"coef_init" if y is not None else "means_init": theta[members].mean(axis=0),
                    "weights_init": weights[members]}
            part = [[a[k] for k in members] for a in data]
            oracle[members] = _theta(_estimator(y, R, seed, method="fedem", **init).fit(*part))
    for name, fit in fits.items():
        out[name] = component_errors(_theta(fit), theta)
    out[ORACLE] = component_errors(oracle, theta)
    return out


def summary(fits):
    """{name: (mean over clients of the seed-averaged ratio, the worst client's ratio)}: each client's error
    averaged over seeds, over its own local EM error averaged over seeds."""
    mean = {name: np.mean([f[name] for f in fits], axis=0) for name in fits[0]}
    return {name: (float(np.mean(e / mean["local EM"])), float(np.max(e / mean["local EM"])))
            for name, e in mean.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    args = parser.parse_args(argv)
    seeds = range(args.seeds or (3 if args.quick else 10))
    print(f"Every client against itself alone, {len(seeds)} seeds: error over local EM's (n_init = 10), the "
          "mean over clients / the worst client\n")
    names = list(args.methods) + [ORACLE]
    print("| shape | local EM error | " + " | ".join(names) + " |\n|---|---|" + "---|" * len(names))
    missed, reported = [], []
    for shape in args.shapes:
        fits = Parallel(n_jobs=args.jobs)(delayed(one_fit)(shape, seed, args.methods) for seed in seeds)
        table = summary(fits)
        local = np.mean([f["local EM"].mean() for f in fits])
        print(f"| {shape} | {local:.3f} | " + " | ".join(f"{table[n][0]:.2f} / {table[n][1]:.2f}" for n in names)
              + " |", flush=True)
        (reported if shape in REPORTED else missed).extend(
            f"{shape}: {name} {table[name][0]:.2f} / {table[name][1]:.2f} of local EM (at most {AT_MOST} / {WORST})"
            for name in ADAPTIVE if name in table and (table[name][0] > AT_MOST or table[name][1] > WORST))
        if shape == "shared" and "FedGrEM" in table and table["FedGrEM"][0] > OVER_ORACLE * table[ORACLE][0]:
            missed.append(f"shared: FedGrEM {table['FedGrEM'][0]:.2f} above {OVER_ORACLE}x the oracle's "
                          f"{table[ORACLE][0]:.2f}")
    print("\n" + "\n".join(f"- MISSED: {m}" for m in missed) if missed else "\n- every checked target holds")
    for m in reported:
        print(f"- DOES NOT HOLD (reported, not checked): {m}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
