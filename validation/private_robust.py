"""Private and robust (issue 46's FedGrEM targets): FedGrEM with differential privacy against FedEM with it.

Three federations, client-level delta = 1e-6, both methods with ``privacy=DifferentialPrivacy(epsilon,
bounds=...)`` at its defaults (clip 1, 40 rounds; ``docs/privacy.md``):

1. **One outlier among 100** (the target's design): ``make_federated_gmm(100, 300, outlier_clients=(0,))``,
   the paper's GMM design with client 0's rows drawn from N(2 1, 3 I) (App. B.1), ``bounds=(-7, 7)``,
   central noise, epsilon 2, 4 and 8. The honest clients' largest error, medians over seeds and the seeds
   where FedGrEM is ahead, and the floor: FedEM with DP on the 99 honest clients alone. Target (issue 46):
   FedGrEM with DP below FedEM with DP at every epsilon >= 2.
2. **One malicious party under local noise**: 10,000 clients of 300 rows (local noise needs many clients:
   each message carries a whole update's noise), epsilon 4, 80 rounds (with 40 the noisy splits go wrong in
   some seeds); the party sends whatever it likes instead of its noisy update, here every mean 1e4 spreads off
   in every coordinate (the server cannot tell: honest messages are noise-dominated too). FedEM averages the
   messages; FedGrEM takes their robust centre.
3. **Two groups** (FedGrEM's adaptivity under noise): 20 clients of 300 rows, ten whose three means are
   ``N(0, 9 I)`` draws and ten whose means are those plus 1 in every coordinate, R = 3 spherical components,
   ``bounds=(-12, 15)``, central noise, epsilon 4 and without noise (epsilon 1e6): the mean over clients of
   each client's error.

4. **Many clients** (full form only): 1,000 clients of 100 to 500 rows (sizes uniform), the paper's GMM design,
   with and without one outlier client (client 0), central noise, epsilon 0.5 to 8 and without privacy (the
   plain fits with their defaults): the honest clients' largest error, both methods.

Checked (non-zero exit when one fails): under local noise the malicious party leaves FedGrEM's honest error
within 10% of its clean one (median); with two groups at epsilon 4, FedGrEM's mean error below FedEM's
(median). Reported, not checked: section 1's target (met by the medians, within the noise: both methods sit on
the floor, docs/privacy.md says why).

    python validation/private_robust.py [--quick] [--seeds N] [--jobs N]
"""

import argparse
import contextlib
import sys
import warnings

import numpy as np
from joblib import Parallel, delayed

import fedmm.privacy
from fedmm import FederatedGaussianMixture
from fedmm.metrics import estimation_errors
from fedmm.privacy import DifferentialPrivacy, decode, shared_point
from fedmm.simulate import make_federated_gmm

DELTA = 1e-6
OUTLIER_EPSILONS, QUICK_OUTLIER_EPSILONS = (2.0, 4.0, 8.0), (4.0,)
METHODS = ("fedem", "fedgrem")
#: How far the malicious party sends every mean, in the components' spreads.
ATTACK = 1e4
LOCAL_ROUNDS = 80


def _errors(fit, weights, theta, clients):
    K = len(weights)
    shared = np.broadcast_to(fit.weights_, weights.shape), np.broadcast_to(fit.means_, (K,) + theta.shape[-2:])
    return estimation_errors(*shared, weights, theta)[1][clients]


def outlier(seed, epsilons):
    """{(epsilon, method): the honest clients' largest error}: section 1."""
    X, truth = make_federated_gmm(100, 300, outlier_clients=(0,), random_state=seed)
    out = {}
    for eps in epsilons:
        privacy = DifferentialPrivacy(eps, DELTA, bounds=(-7.0, 7.0))
        for method in METHODS:
            fit = FederatedGaussianMixture(5, method=method, random_state=seed, privacy=privacy).fit(X)
            out[eps, method] = _errors(fit, truth.weights, truth.theta, np.arange(1, 100)).max()
        # The floor: FedEM with DP on the honest clients alone, the outlier left out.
        fit = FederatedGaussianMixture(5, method="fedem", random_state=seed, privacy=privacy).fit(X[1:])
        out[eps, "floor"] = _errors(fit, truth.weights[1:], truth.theta[1:], np.arange(99)).max()
    return out


@contextlib.contextmanager
def malicious(party=0, shift=ATTACK):
    """Client ``party`` replies, in every round of every private fit in this block, with the release's
    components moved by ``shift`` spreads in every coordinate, its proportions and variances the release's."""
    step = fedmm.privacy.PrivateClients.step

    def attacked(self, strategy, broadcast, heard=None):
        messages, replied = step(self, strategy, broadcast, heard)
        point = shared_point(broadcast.params)
        R, p = point.theta.shape
        v = np.zeros(R + R * p + (self.family.log_scale(point.scale, p).size if self.family.estimates_scale else 0))
        v[R:R + R * p] = shift
        _, theta, _ = decode(self.family, p, v, point)
        messages.theta[party] = theta
        messages.weights[party] = point.weights
        messages.scale[party] = point.scale
        return messages, replied
    fedmm.privacy.PrivateClients.step = attacked
    try:
        yield
    finally:
        fedmm.privacy.PrivateClients.step = step


def local(seed, n_clients):
    """{(attacked, method): the honest clients' largest error}: section 2."""
    X, truth = make_federated_gmm(n_clients, 300, random_state=seed)
    out = {}
    for attacked in (False, True):
        for method in METHODS:
            privacy = DifferentialPrivacy(4.0, DELTA, bounds=(-7.0, 7.0), noise="local", rounds=LOCAL_ROUNDS)
            with malicious() if attacked else contextlib.nullcontext():
                fit = FederatedGaussianMixture(5, method=method, random_state=seed, privacy=privacy).fit(X)
            out[attacked, method] = _errors(fit, truth.weights, truth.theta, np.arange(1, n_clients)).max()
    return out


def groups(seed):
    """{(epsilon, method): the mean over clients of each client's error}: section 3."""
    centers = np.random.RandomState(seed).normal(scale=3.0, size=(3, 10))
    Xa, truth_a = make_federated_gmm(10, 300, centers=centers, random_state=seed + 1)
    Xb, truth_b = make_federated_gmm(10, 300, centers=centers + 1.0, random_state=seed + 2)
    theta = np.concatenate([np.broadcast_to(centers, (10, 3, 10)), np.broadcast_to(centers + 1.0, (10, 3, 10))])
    weights = np.concatenate([truth_a.weights, truth_b.weights])
    out = {}
    for eps in (4.0, 1e6):
        for method in METHODS:
            fit = FederatedGaussianMixture(3, method=method, covariance_type="spherical", random_state=0,
                                           privacy=DifferentialPrivacy(eps, DELTA, bounds=(-12.0, 15.0))).fit(Xa + Xb)
            out[eps, method] = _errors(fit, weights, theta, np.arange(20)).mean()
    return out


MANY_EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0, None)


def many(seed, with_outlier):
    """{(epsilon, method): the honest clients' largest error}: section 4 (epsilon None: no privacy)."""
    sizes = np.random.RandomState(seed).randint(100, 501, size=1000)
    X, truth = make_federated_gmm(1000, sizes, outlier_clients=(0,) if with_outlier else (), random_state=seed)
    honest = np.arange(1 if with_outlier else 0, 1000)
    out = {}
    for eps in MANY_EPSILONS:
        privacy = None if eps is None else DifferentialPrivacy(eps, DELTA, bounds=(-7.0, 7.0))
        for method in METHODS:
            fit = FederatedGaussianMixture(5, method=method, random_state=seed, privacy=privacy).fit(X)
            out[eps, method] = _errors(fit, truth.weights, truth.theta, honest).max()
    return out


def _quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


def _table(title, results, keys, label):
    print(f"\n{title}\n")
    print(f"| {label} | FedEM with DP: median (range) | FedGrEM with DP: median (range) | FedGrEM ahead in |")
    print("|---|---|---|---|")
    for key in keys:
        e, g = (np.array([r[key, m] for r in results]) for m in METHODS)
        print(f"| {key} | {np.median(e):.3f} ({e.min():.3f}-{e.max():.3f}) | {np.median(g):.3f} "
              f"({g.min():.3f}-{g.max():.3f}) | {(g < e).sum()} of {len(e)} seeds |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="epsilon 4 only, 2 seeds, one seed of 10,000 clients")
    parser.add_argument("--seeds", type=int, default=None, help="seeds (default 10; 2 with --quick)")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    seeds = range(args.seeds or (2 if args.quick else 10))
    epsilons = QUICK_OUTLIER_EPSILONS if args.quick else OUTLIER_EPSILONS
    run = Parallel(n_jobs=args.jobs)

    found = run(delayed(_quiet)(outlier, seed, epsilons) for seed in seeds)
    _table(f"1. One outlier among K = 100 clients of 300 rows, central noise, {len(seeds)} seeds: the honest "
           "clients' largest error", found, epsilons, "epsilon")
    for eps in epsilons:
        floor = np.array([r[eps, "floor"] for r in found])
        print(f"- epsilon {eps:g}: FedEM with DP on the honest clients alone (the outlier left out: the floor) "
              f"{np.median(floor):.3f} ({floor.min():.3f}-{floor.max():.3f})")
    ahead = {eps: np.median([r[eps, "fedgrem"] for r in found]) < np.median([r[eps, "fedem"] for r in found])
             for eps in epsilons}
    print(f"\nTarget (reported, not checked): FedGrEM with DP below FedEM with DP at every epsilon >= 2 (medians): "
          f"{'met' if all(ahead.values()) else 'MISSED'} ({', '.join(f'{e:g}: {a}' for e, a in ahead.items())})")

    attacked = run(delayed(_quiet)(local, seed, 10_000) for seed in seeds[:1 if args.quick else 3])
    _table(f"2. Local noise, K = 10,000 clients of 300 rows, epsilon 4, {LOCAL_ROUNDS} rounds: the honest clients' "
           f"largest error, clean and with one party sending every mean {ATTACK:g} spreads off", attacked,
           (False, True), "attacked")
    grouped = run(delayed(_quiet)(groups, seed) for seed in seeds)
    _table(f"3. Two groups of 10 clients (means 1 apart in every coordinate), central noise, {len(seeds)} seeds: "
           "mean error over clients", grouped, (4.0, 1e6), "epsilon")

    if not args.quick:
        for with_outlier in (False, True):
            found = run(delayed(_quiet)(many, seed, with_outlier) for seed in seeds[:5])
            _table(f"4. K = 1,000 clients of 100-500 rows{', one an outlier' if with_outlier else ''}, central "
                   f"noise, {min(len(seeds), 5)} seeds: the honest clients' largest error (None: no privacy)",
                   found, MANY_EPSILONS, "epsilon")

    median = lambda results, key, method: np.median([r[key, method] for r in results])  # noqa: E731
    checks = [("under local noise the malicious party leaves FedGrEM's honest error within 10% of its clean one",
               median(attacked, True, "fedgrem") <= 1.1 * median(attacked, False, "fedgrem")),
              ("two groups at epsilon 4: FedGrEM's mean error below FedEM's",
               median(grouped, 4.0, "fedgrem") < median(grouped, 4.0, "fedem"))]
    print()
    for text, holds in checks:
        print(f"- {'holds' if holds else 'DOES NOT HOLD'}: {text}")
    return 0 if all(holds for _, holds in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
