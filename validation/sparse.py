"""Sparse FedGrEM against the dimension (issue 64): error against d, support recovery, the rate's slopes, speed.

The design (issue 64): a two-component Gaussian mixture in ``d`` dimensions with identity covariances, the two
means ``+-a`` on the first ``s = 10`` coordinates and 0 elsewhere, ``a = 2 / sqrt(s)`` (the means 4 apart),
equal proportions; ``K = 10`` clients of ``n = 100`` rows whose means differ from those by a vector of norm
``h = 0.2`` on the support; one outlier client of ``N(2 * 1_d, 3 I_d)`` (FedGrEM App. B.1's). Error: the
largest honest-client distance of a mean to its true value (the worse component, after the better of the two
labellings per client). Methods, all with ``covariance_type="identity"`` (the model):

- ``sparse-fedgrem``: the method, with ``sparse_about="origin"`` (the means sparse about 0, as designed), from
  its default start (``init="screened"``: the clients' k-means on the features of excess pooled variance);
- ``fedgrem``: dense FedGrEM (defaults);
- ``local sparse``: sparse-fedgrem fitted on each client alone (the local sparse EM);
- ``local em``: dense local EM;
- ``sparse, dense start``: sparse-fedgrem from dense FedGrEM's start (``init="pooled-and-local"``), its default
  before the screened start;
- ``oracle``: EM (fedmm's pooled EM, ``n_init=5``) on the honest clients' pooled rows restricted to the true
  support, zero elsewhere.

The rate study (``--rate``): ``h = 0``, no outlier, the error of the centre ``center_``, against ``d`` at
``n = 100`` and against ``n`` at ``d = 500``; the slopes of ``log error`` against ``log log d`` and
``log(1 / n)`` (least squares) beside the theory's 0.5 and 0.5 (:func:`fedmm.theory.sparse_rate`, error
``sqrt(s log d / n)``), on the design above and on one with ``S`` more coordinates at the detection boundary
(``weak``, :func:`make_sparse_gmm`), with the support oracle's beside. The speed study (``--speed``): ``K = 100``
clients of 100 rows, timed per ``d``, with the time of the pooled moments (``fedmm.units.pooled_moments``) apart;
``--round``: one round's cost. The selection study (``--selection``): how often BIC (``n_components`` 1 to 4) and
``select_n_components``'s default pick the design's two components, with the outlier and without (sparse-fedgrem's
defaults, ``sparse_about="mean"``; reported, not checked). The new-client study (``--new-client``): a client of
30 or 300 rows whose means are ``h_new`` from the honest clients' on the support joins a fitted federation:
``personalize``'s error against the consensus's and the client's own sparse fit's (reported, not checked).

Targets (issue 64): sparse-fedgrem within 2x the oracle's error at every ``d``, and at most a quarter of dense
FedGrEM's at the issue's ``d = 500`` and above (reported below it, where dense FedGrEM finds the clusters);
the slopes within 20% of the theory's (reported, not checked: see docs/research/sparse.md). The script exits
1 when an error target is missed.

    python validation/sparse.py [--quick] [--seeds N] [--d 100,500] [--rate] [--speed 500,1000] [--round 5000]
                                [--selection 100,500] [--new-client 500] [--figure PATH]
"""

import argparse
import itertools
import sys
import time
import warnings

import numpy as np

from fedmm import FederatedGaussianMixture, select_n_components
from fedmm.data import FederatedData
from fedmm.methods import SparseFedGrEM
from fedmm.theory import sparse_bound
from fedmm.units import pooled_moments

S, SEP, K, N_ROWS, H = 10, 4.0, 10, 100, 0.2


def make_sparse_gmm(d, s=S, n_clients=K, n_samples=N_ROWS, h=H, outlier=True, seed=0, weak=0):
    """``(X, means)``: the clients' rows (the outlier last) and the honest clients' true means (K, 2, d).

    ``weak`` more coordinates (after the ``s``) carry ``+-b``, ``b = sqrt(2 log d / N)`` for ``N`` the rows of a
    component pooled over the clients: the detection boundary (Donoho & Johnstone 1994's universal threshold;
    Donoho & Jin 2004), where no estimator can tell a coordinate from the largest noise one: the signals on which the
    sparse minimax lower bound ``sqrt(s log d / n)`` is attained (Raskutti, Wainwright & Yu 2011, Thm. 1 with
    ``q = 0``; Cai, Ma & Zhang 2019, their lower bound for the sparse mixture's discriminant vector)."""
    rng = np.random.default_rng(seed)
    mu = np.zeros((2, d))
    a = SEP / 2.0 / np.sqrt(s)
    mu[0, :s], mu[1, :s] = a, -a
    b = np.sqrt(2.0 * np.log(d) / (n_clients * n_samples / 2.0))
    mu[0, s:s + weak], mu[1, s:s + weak] = b, -b
    X, means = [], []
    for _ in range(n_clients):
        shift = rng.normal(size=(2, s))
        shift *= h / np.linalg.norm(shift, axis=1, keepdims=True)
        m = mu.copy()
        m[:, :s] += shift
        means.append(m)
        X.append(m[rng.integers(0, 2, n_samples)] + rng.normal(size=(n_samples, d)))
    if outlier:
        X.append(2.0 + np.sqrt(3.0) * rng.normal(size=(n_samples, d)))
    return X, np.array(means)


def worst_error(estimates, means):
    """The largest honest-client error: per client the worse component after the better labelling."""
    return max(min(np.linalg.norm(e - m, axis=1).max(), np.linalg.norm(e[::-1] - m, axis=1).max())
               for e, m in zip(estimates, means))


def _fit(X, method, seed, **kwargs):
    """``"sparse-fedgrem"`` is fitted with ``sparse_about="origin"``: the design's means are sparse about 0."""
    if method == "sparse-fedgrem":
        method = SparseFedGrEM(sparse_about="origin")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FederatedGaussianMixture(2, method=method, covariance_type="identity", random_state=seed,
                                        **kwargs).fit(X)


def oracle(X_honest, d, seed, support=S):
    """Pooled EM on the honest rows' true support (the first ``support`` features), zero elsewhere: (2, d)."""
    rows = np.vstack(X_honest)[:, :support]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = FederatedGaussianMixture(2, method="pooled-em", covariance_type="identity", n_init=5,
                                       random_state=seed).fit([rows])
    full = np.zeros((2, d))
    full[:, :support] = fit.means_[0]
    return full


def one_setting(d, seed):
    """Errors of every method and the support recovery of sparse-fedgrem at one ``d`` and seed."""
    X, means = make_sparse_gmm(d, seed=seed)
    honest = X[:K]
    sparse = _fit(X, "sparse-fedgrem", seed)
    dense_start = _fit(X, "sparse-fedgrem", seed, init="pooled-and-local")
    dense = _fit(X, "fedgrem", seed)
    local_sparse = np.stack([_fit([x], "sparse-fedgrem", seed).means_[0] for x in honest])
    local = _fit(honest, "local-em", seed).means_
    best = oracle(honest, d, seed)
    support = sparse.support_
    return {"sparse-fedgrem": worst_error(sparse.means_[:K], means),
            "sparse, dense start": worst_error(dense_start.means_[:K], means),
            "fedgrem": worst_error(dense.means_[:K], means),
            "local sparse": worst_error(local_sparse, means), "local em": worst_error(local, means),
            "oracle": worst_error(np.broadcast_to(best, means.shape), means),
            "TP": int(support[:S].sum()), "FP": int(support[S:].sum()),
            "outlier flagged": int(K in sparse.suspected_outliers_)}


def error_table(ds, seeds):
    rows = []
    for d in ds:
        runs = [one_setting(d, seed) for seed in range(seeds)]
        row = {"d": d, **{key: float(np.mean([r[key] for r in runs])) for key in runs[0]}}
        row["bound"] = sparse_bound(n=N_ROWS, K=K + 1, d=d, s=S, R=2, h=H, eps=1 / (K + 1)).total
        rows.append(row)
        print(f"{d:>6} " + " ".join(f"{row[key]:>{max(14, len(key))}.3f}" for key in METHODS) +
              f" {row['TP']:>5.1f} {row['FP']:>5.1f} {row['outlier flagged']:>7.2f}", flush=True)
    return rows


METHODS = ("sparse-fedgrem", "sparse, dense start", "fedgrem", "local sparse", "local em", "oracle")


def slope(x, y):
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def centre_error(d, n, seed, thresholding, weak=0):
    """The errors of sparse-fedgrem's centre and of the support oracle's (``weak`` coordinates at the detection
    boundary, :func:`make_sparse_gmm`)."""
    X, means = make_sparse_gmm(d, n_samples=n, h=0.0, outlier=False, seed=seed, weak=weak)
    method = SparseFedGrEM(thresholding=thresholding, sparse_about="origin")
    center = _fit(X, method, seed).center_
    return worst_error([center], means[:1]), worst_error([oracle(X, d, seed, S + weak)], means[:1])


#: The rate study's designs: (label, thresholding, weak coordinates at the detection boundary).
RATE_DESIGNS = (("firm", "firm", 0), ("soft", "soft", 0), ("firm, least-favourable", "firm", S))


def rate_study(seeds, quick):
    """The slopes of the centre's error in ``log log d`` and ``log(1 / n)``: firm and soft thresholding on the
    issue's design, and firm with ``S`` more coordinates at the detection boundary (:func:`make_sparse_gmm`), the
    signals where the bound's ``log d`` is paid; the support oracle's slopes beside each."""
    ds = (50, 200, 1000) if quick else (100, 300, 1000, 3000)
    ns = (50, 100, 200) if quick else (50, 100, 200, 400, 800)
    print("\nrate study (h = 0, no outlier, error of the centre; the support oracle's in brackets)")
    slopes = {}
    for label, rule, weak in RATE_DESIGNS:
        by_d = np.array([np.mean([centre_error(d, N_ROWS, s, rule, weak) for s in range(seeds)], axis=0)
                         for d in ds])
        by_n = np.array([np.mean([centre_error(500, n, s, rule, weak) for s in range(seeds)], axis=0) for n in ns])
        slopes[label] = slope(np.log(ds), by_d[:, 0]), slope(1.0 / np.array(ns), by_n[:, 0])
        print(f"  {label}: by d (n = {N_ROWS}):", ", ".join(f"{d}: {e:.3f} ({o:.3f})" for d, (e, o) in zip(ds, by_d)))
        print(f"  {label}: by n (d = 500):", ", ".join(f"{n}: {e:.3f} ({o:.3f})" for n, (e, o) in zip(ns, by_n)))
        print(f"  {label}: slope in log log d {slopes[label][0]:.2f} (oracle {slope(np.log(ds), by_d[:, 1]):.2f}; "
              f"theory 0.50), in log(1/n) {slopes[label][1]:.2f} (oracle {slope(1.0 / np.array(ns), by_n[:, 1]):.2f}; "
              "theory 0.50)", flush=True)
    return slopes


def speed_study(ds, n_clients=100):
    print(f"\nspeed: {n_clients} clients of {N_ROWS} rows, sparse-fedgrem (identity), its default start")
    for d in ds:
        X, _ = make_sparse_gmm(d, n_clients=n_clients, seed=0)
        t0 = time.perf_counter()
        pooled_moments(FederatedData.from_input(X))
        moments = time.perf_counter() - t0
        t0 = time.perf_counter()
        fit = _fit(X, "sparse-fedgrem", 0)
        total = time.perf_counter() - t0
        print(f"  d = {d:>5}: fit {total:6.1f} s ({fit.n_iter_} rounds), of which the pooled moments "
              f"(per-feature sums) {moments:6.1f} s", flush=True)


def selection_study(ds, seeds, grid=(1, 2, 3, 4)):
    """How many of ``seeds`` fits BIC and ``select_n_components`` (default criterion) give two components."""
    print(f"\nselection of n_components in {grid} (true 2), {seeds} seeds: seeds choosing 2 (choices)")
    for d in ds:
        for outlier in (False, True):
            bic, chosen = [], []
            for seed in range(seeds):
                X, _ = make_sparse_gmm(d, outlier=outlier, seed=seed)
                model = FederatedGaussianMixture(2, method="sparse-fedgrem", covariance_type="identity",
                                                 random_state=seed)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    scores = [model.set_params(n_components=R).fit(X).bic(X) for R in grid]
                    best = select_n_components(model, X, n_components=grid, random_state=seed).best_params
                bic.append(grid[int(np.argmin(scores))])
                chosen.append(best["n_components"])
            print(f"  d = {d:>5}, outlier {outlier!s:>5}: BIC {bic.count(2)} {bic}; select_n_components "
                  f"{chosen.count(2)} {chosen}", flush=True)


def new_client_study(ds, seeds):
    """A new client's error: ``personalize``, the consensus (``centers_[0]``) and its own sparse fit, per ``h_new``."""
    print(f"\na new client's largest error, mean of {seeds} seeds: personalize / consensus / own sparse fit")
    for d in ds:
        for h_new, rows in itertools.product((0.2, 1.0, 3.0), (30, 300)):
            errors = []
            for seed in range(seeds):
                X, _ = make_sparse_gmm(d, seed=seed)
                rng = np.random.default_rng(100 + seed)
                truth = np.zeros((1, 2, d))
                truth[0, 0, :S], truth[0, 1, :S] = SEP / 2.0 / np.sqrt(S), -SEP / 2.0 / np.sqrt(S)
                shift = rng.normal(size=(2, S))
                truth[0, :, :S] += h_new * shift / np.linalg.norm(shift, axis=1, keepdims=True)
                x = truth[0][rng.integers(0, 2, rows)] + rng.normal(size=(rows, d))
                fit = _fit(X, "sparse-fedgrem", seed)
                errors.append([worst_error([e], truth) for e in (fit.personalize(x).params_.theta[0],
                                                                 fit.centers_[0], _fit([x], "sparse-fedgrem",
                                                                                       seed).means_[0])])
            print(f"  d = {d:>5}, h_new {h_new}, {rows:>3} rows: " + " / ".join(f"{e:.3f}" for e in np.mean(errors, 0)),
                  flush=True)


def round_study(ds, n_clients=100):
    print(f"\none round, {n_clients} clients of {N_ROWS} rows (best of 3)")
    for d in ds:
        clients, server = round_cost(d, n_clients)
        print(f"  d = {d:>5}: clients' E-step and gradient step {clients:.3f} s, server (central update and "
              f"sparse step) {server:.3f} s", flush=True)


def round_cost(d, n_clients=100, repeats=3):
    """Seconds of one round at ``d`` with ``n_clients`` clients of 100 rows, its two parts timed apart: every
    client's E-step and gradient step (numba kernels, one pass over the data) and the server's FedGrEM central
    update plus the sparse step, measured without a fit (``docs/research/sparse.md``)."""
    from fedmm.families import GaussianFamily, MixtureParams
    from fedmm.protocol import ClientMessage
    X, _ = make_sparse_gmm(d, n_clients=n_clients, seed=0)
    data = FederatedData.from_input(X)
    family = GaussianFamily("identity", backend="numba")
    K = data.n_clients
    rng = np.random.default_rng(0)
    start = MixtureParams(np.full((K, 2), 0.5), np.broadcast_to(rng.normal(size=(2, d)) * 0.1, (K, 2, d)).copy(),
                          np.ones((K, 2, 1)))
    method = SparseFedGrEM(sparse_about="origin").validate()
    broadcast, state = method.server_start(family, start, data.n_samples.astype(float))
    client = method.client_start(start, data.n_samples.astype(float))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        loglik, stats = family.estep(data, broadcast.params)
        local = method.local_update(family, stats, client, data.n_samples.astype(float))
        t1 = time.perf_counter()
        messages = ClientMessage(data.n_samples.astype(float), loglik, *local, stats)
        method.server_step(messages, state, 1)
        times.append((t1 - t0, time.perf_counter() - t1))
    return np.min(times, axis=0)


def figure(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ds = [r["d"] for r in rows]
    for key, style in zip(METHODS, ("o-", "o--", "s--", "^:", "v:", "k-")):
        ax.plot(ds, [r[key] for r in rows], style, label=key, ms=4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("d (features)")
    ax.set_ylabel("largest honest-client error")
    ax.set_title(f"s = {S}, {K} clients of {N_ROWS} rows + 1 outlier", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="d in {50, 200}, 2 seeds")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--d", type=str, default=None, help="comma-separated d of the error table (default 100 to "
                        "2000)")
    parser.add_argument("--rate", action="store_true", help="also the rate study (slopes)")
    parser.add_argument("--speed", type=str, default=None, help="comma-separated d for the speed study (K = 100)")
    parser.add_argument("--round", type=str, default=None, help="comma-separated d: one round's cost (K = 100)")
    parser.add_argument("--selection", type=str, default=None, help="comma-separated d: the selection study")
    parser.add_argument("--new-client", type=str, default=None, help="comma-separated d: the new-client study")
    parser.add_argument("--figure", type=str, default=None, help="write the error-against-d figure here")
    args = parser.parse_args(argv)
    seeds = args.seeds or (2 if args.quick else 5)
    ds = [int(d) for d in args.d.split(",")] if args.d else (50, 200) if args.quick else (100, 200, 500, 1000, 2000)
    print(f"largest honest-client error, mean of {seeds} seeds; support of sparse-fedgrem (true {S})")
    print(f"{'d':>6} " + " ".join(f"{m:>{max(14, len(m))}}" for m in METHODS) + f" {'TP':>5} {'FP':>5} {'flagged':>7}")
    rows = error_table(ds, seeds)
    # The quarter of dense FedGrEM's error is the target at its design's d = 500 and above: below, dense
    # FedGrEM finds the clusters and its sqrt(d / n) is small (reported, not checked).
    failed = [r["d"] for r in rows if not (r["sparse-fedgrem"] <= 2 * r["oracle"]
                                          and (r["d"] < 500 or r["sparse-fedgrem"] <= r["fedgrem"] / 4))]
    for r in rows:
        print(f"  d = {r['d']}: sparse / oracle {r['sparse-fedgrem'] / r['oracle']:.2f} (target <= 2), "
              f"sparse / fedgrem {r['sparse-fedgrem'] / r['fedgrem']:.2f} (target <= 0.25), "
              f"sparse bound's total {r['bound']:.2f}")
    if args.figure:
        figure(rows, args.figure)
    if args.rate:
        rate_study(seeds, args.quick)
    if args.speed:
        speed_study([int(d) for d in args.speed.split(",")])
    if args.round:
        round_study([int(d) for d in args.round.split(",")])
    if args.selection:
        selection_study([int(d) for d in args.selection.split(",")], seeds)
    if args.new_client:
        new_client_study([int(d) for d in args.new_client.split(",")], seeds)
    print("FAIL at d = " + ", ".join(map(str, failed)) if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
