"""The attack suite (issue 44): what malicious parties do to the honest clients' estimates.

Design (the issue's): the paper's GMM (``make_federated_gmm(10, 120)``, d = 10, R = 5, h = 0), diagonal
covariances, 10 clients of which the last 1, 2 or 3 are malicious.

- **On Flower** (``fedmm.flower.fit`` over ``LocalGrid``): every attack of :data:`fedmm.flower.attacks.ATTACKS`
  (replies that pass every format check), ``copy`` (a node that answers with another node's replies) and
  ``mimic`` (the same, times ``1 + 1e-12``).
- **In one process**, where a party's only lever is the data it brings: ``heavy-shift`` (100 times the others'
  rows, shifted by +3), ``huge`` (its data times 1e12), ``label-flip`` (each sample moved from its component's
  centre to another's) and ``copy`` (another client's rows).

Per fit: the honest clients' largest error, whether the fit raised, honest clients evicted, and whether the
malicious clients (and honest ones) are among ``suspected_outliers_``. Per attack and method: the mean over
seeds of the largest honest error, against the clean fit's (the same honest clients without any attacker).

Targets (FedGrEM): with one malicious node of 10 the mean largest honest error at most 1.5x the clean fit's;
with 3 of 10 at most 2x; malicious nodes flagged in at least 90% of fits and honest ones in at most 5%; no
method raises or evicts an honest client. Exits non-zero when a FedGrEM target is missed or any method raises
or evicts an honest client.

    python validation/attacks.py [--quick] [--seeds N] [--jobs N] [--output PATH]
"""

import argparse
import itertools
import sys
import warnings

import numpy as np
from joblib import Parallel, delayed

from fedmm import FederatedGaussianMixture
from fedmm.flower import client_app, fit
from fedmm.flower.attacks import ATTACKS, MIMIC, copying, malicious
from fedmm.flower.testing import LocalGrid
from fedmm.metrics import estimation_errors
from fedmm.simulate import make_federated_gmm

K, N, R = 10, 120, 5
#: The methods with their defaults (every start is made from messages, so the defaults run across parties).
METHODS = {"FedGrEM": dict(method="fedgrem"), "FedEM": dict(method="fedem")}
FLOWER = tuple(ATTACKS) + ("copy", "mimic")
IN_PROCESS = ("heavy-shift", "huge", "label-flip", "copy")
QUICK = dict(flower=("shift-n", "hello-sum_x", "stats-Sxx", "theta-1e12", "units-scale", "copy"),
             in_process=("heavy-shift", "huge"), n_bad=(1, 3))
TARGET_ONE, TARGET_THREE, FLAGGED, FALSE_FLAGS = 1.5, 2.0, 0.9, 0.05
#: Attacks that leave no trace any test can see: in one process, ``label-flip`` moves each row from its
#: component's centre to the next one's, which gives an honest client's data with its proportions permuted; the
#: design draws proportions from a symmetric Dirichlet, so such a client has the very law of an honest one, and a
#: test that flagged it would flag honest clients as often.
UNSEEABLE = {("one process", "label-flip")}


def _estimator(method, seed):
    return FederatedGaussianMixture(R, random_state=seed, **METHODS[method])


def _outcome(est, truth, bad):
    """(largest honest error, honest evicted, every attacker flagged or dropped, an honest client flagged, attackers
    dropped) of a fitted estimator."""
    ids = np.asarray(est.client_ids_)
    index = ids if ids.max() < 100 else ids - 100           # node ids (100 + k) when names are not unique
    kept_honest = np.array([k not in bad for k in index])
    honest = index[kept_honest]
    error = estimation_errors(est.weights_[kept_honest], est.means_[kept_honest], truth.weights[honest],
                              truth.theta[honest])[1].max()
    flagged = set(np.asarray(getattr(est, "suspected_outliers_", []), dtype=int).tolist())
    flagged = {k if ids.max() < 100 else k - 100 for k in flagged}
    evicted = K - len(bad) - len(honest)
    dropped = set(bad) - set(index.tolist())
    return float(error), int(evicted), bool(set(bad) <= flagged | dropped), bool(flagged - set(bad)), len(dropped)


def _flower_fit(method, attack, bad, X, seed):
    apps = [client_app(lambda ctx, k=k: (X[k], None)) for k in range(K)]
    grid = LocalGrid(apps, node_ids=[100 + k for k in range(K)])
    for i, k in enumerate(bad):
        if attack in ("copy", "mimic"):
            copying(grid, source=100 + i, target=100 + k, factor=MIMIC if attack == "mimic" else 1.0)
        elif attack is not None:
            grid.apps[100 + k] = malicious(apps[k], attack)
    return fit(_estimator(method, seed), grid)


def _data_attack(attack, X, truth, k, seed):
    rng = np.random.RandomState(seed + 1000 + k)
    if attack == "heavy-shift":
        return np.tile(X[k] + 3.0, (100, 1))
    if attack == "huge":
        return X[k] * 1e12
    if attack == "label-flip":
        theta = truth.theta[k]
        return X[k] - theta[truth.labels[k]] + theta[(truth.labels[k] + 1) % len(theta)]
    if attack == "copy":
        return X[k - (K - 3)].copy() + 0.0 * rng.standard_normal()
    raise ValueError(attack)


def _in_process_fit(method, attack, bad, X, truth, seed):
    X = list(X)
    for k in bad:
        X[k] = _data_attack(attack, X, truth, k, seed) if attack is not None else X[k]
    return _estimator(method, seed).fit(X)


def one(path, method, attack, n_bad, seed):
    """One fit's outcome, or the error it raised."""
    X, truth = make_federated_gmm(K, N, random_state=seed)
    bad = tuple(range(K - n_bad, K))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            est = (_flower_fit(method, attack, bad, X, seed) if path == "Flower"
                   else _in_process_fit(method, attack, bad, X, truth, seed))
        except Exception as error:                          # a raise is an outcome the suite reports
            return {"raised": f"{type(error).__name__}: {str(error)[:120]}"}
    # The clean fit's honest clients are the same ones: the reference leaves the attackers' data out.
    error, evicted, flagged, false_flag, dropped = _outcome(est, truth, bad if attack is not None else ())
    return {"raised": None, "error": error, "evicted": evicted, "flagged": flagged, "false_flag": false_flag,
            "dropped": dropped}


def clean_reference(method, n_bad, seed, path):
    """The honest clients' largest error with the attackers' clients honest, what an attack is measured against,
    and whether the clean fit flags any of them."""
    X, truth = make_federated_gmm(K, N, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = _flower_fit(method, None, (), X, seed) if path == "Flower" else _estimator(method, seed).fit(X)
    honest = np.arange(K - n_bad)
    flagged = bool(set(np.asarray(getattr(est, "suspected_outliers_", []), dtype=int).tolist()) & set(honest.tolist()))
    return float(estimation_errors(est.weights_[honest], est.means_[honest], truth.weights[honest],
                                   truth.theta[honest])[1].max()), flagged


def run(flower, in_process, n_bad, seeds, jobs):
    cases = [("Flower", a) for a in flower] + [("one process", a) for a in in_process]
    jobs_list = [(path, m, a, b, s) for (path, a), m, b, s in itertools.product(cases, METHODS, n_bad, seeds)]
    outcomes = Parallel(n_jobs=jobs)(delayed(one)(*j) for j in jobs_list)
    refs = Parallel(n_jobs=jobs)(delayed(clean_reference)(m, b, s, p) for p, m, b, s in
                                 itertools.product(("Flower", "one process"), METHODS, n_bad, seeds))
    ref_keys = list(itertools.product(("Flower", "one process"), METHODS, n_bad, seeds))
    clean = {}
    for key, (value, flagged) in zip(ref_keys, refs):
        clean.setdefault(key[:3], []).append(value)
        if key[1] == "FedGrEM":
            clean.setdefault("flags", []).append(flagged)
    table = {}
    for job, outcome in zip(jobs_list, outcomes):
        table.setdefault(job[:4], []).append(outcome)
    return table, {key: float(np.mean(v)) for key, v in clean.items()}   # "flags": clean fits flagging an honest one


def report(table, clean):
    lines = ["| path | attack | bad | method | clean | attacked | ratio | raised | honest evicted | "
             "attackers dropped | attackers caught | honest flagged |", "|" + "---|" * 12]
    misses, caught, false, seeable = [], [], [], []
    for (path, method, attack, n_bad), outcomes in sorted(table.items(), key=lambda kv: (kv[0][0], kv[0][2],
                                                                                          kv[0][3], kv[0][1])):
        raised = [o["raised"] for o in outcomes if o["raised"]]
        done = [o for o in outcomes if not o["raised"]]
        ref = clean[(path, method, n_bad)]
        mean = np.mean([o["error"] for o in done]) if done else np.nan
        evicted = sum(o["evicted"] for o in done)
        flagged = np.mean([o["flagged"] for o in done]) if done else np.nan
        honest_flagged = np.mean([o["false_flag"] for o in done]) if done else np.nan
        if method == "FedGrEM":
            caught += [o["flagged"] for o in done]
            false += [o["false_flag"] for o in done]
            seeable += [o["flagged"] for o in done] if (path, attack) not in UNSEEABLE else []
        dropped = sum(o["dropped"] for o in done)
        lines.append(f"| {path} | {attack} | {n_bad} | {method} | {ref:.3f} | {mean:.3f} | {mean / ref:.2f} | "
                     f"{len(raised)} | {evicted} | {dropped} | {flagged:.0%} | {honest_flagged:.0%} |")
        if raised or evicted:
            misses.append(f"{path} {attack} x{n_bad} {method}: {len(raised)} raised ({raised[:1]}), "
                          f"{evicted} honest evicted")
        if method == "FedGrEM" and done:
            limit = TARGET_ONE if n_bad == 1 else TARGET_THREE
            if mean > limit * ref:
                misses.append(f"{path} {attack} x{n_bad} FedGrEM: {mean / ref:.2f}x the clean fit (target {limit}x)")
    lines.append(f"\nFedGrEM over every attack: the attackers caught (flagged in `suspected_outliers_` or dropped by "
                 f"the server) in {np.mean(caught):.0%} of fits (target {FLAGGED:.0%}), an honest client flagged in "
                 f"{np.mean(false):.0%} (target at most {FALSE_FLAGS:.0%}); in the clean fits, {clean['flags']:.0%}. "
                 f"Over the attacks a test can see (all but {', '.join(' '.join(u) for u in sorted(UNSEEABLE))}, "
                 f"whose party has an honest client's law), caught in {np.mean(seeable):.0%}.")
    if np.mean(caught) < FLAGGED or np.mean(false) > FALSE_FLAGS:
        misses.append(f"FedGrEM flags: attackers caught in {np.mean(caught):.0%}, honest flagged in "
                      f"{np.mean(false):.0%}")
    return "\n".join(lines), misses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few attacks, 1 and 3 attackers, 2 seeds")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--output", help="write the table (markdown) here")
    args = parser.parse_args(argv)
    if args.quick:
        flower, in_process, n_bad, seeds = QUICK["flower"], QUICK["in_process"], QUICK["n_bad"], range(2)
    else:
        flower, in_process, n_bad, seeds = FLOWER, IN_PROCESS, (1, 2, 3), range(args.seeds)
    table, clean = run(flower, in_process, n_bad, list(seeds), args.jobs)
    text, misses = report(table, clean)
    print(text)
    for miss in misses:
        print("MISS:", miss)
    if args.output:
        with open(args.output, "w") as f:
            f.write(f"`python validation/attacks.py --seeds {args.seeds}`{' --quick' if args.quick else ''}\n\n"
                    + text + "\n")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
