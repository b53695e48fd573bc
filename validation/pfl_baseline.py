"""pfl as a validation baseline, run for real (issue 59, items 2 and 3): Apple's pfl 0.6 against fedmm and scikit-learn.

The design is validation/fedem_optimum.py's, from its generator (5 components in R^10, means ``3 N(0, I)`` at
least 4 apart, identity covariances, each client's proportions Dirichlet(1), rows clipped to [-7, 7];
A: 100 clients x 300 rows, B: 1,000 clients x 50 rows). Every library fits the same arrays:

- scikit-learn ``GaussianMixture(5, covariance_type="diag")`` on the pooled rows;
- pfl 0.6's ``ExpectationMaximizationGMM`` on a ``GaussianMixtureModel`` (diagonal Gaussians), every client a
  user of a ``FederatedDataset`` in pfl's ``SimulatedBackend``, all of them in every round: 40 central
  iterations from pfl's one-component start, the heaviest component split every 4 iterations up to 5
  (``make_compute_new_num_components(0, 4, 5, step_components=1)``), pfl's ``GMMHyperParams`` defaults otherwise
  (variance floor 1% of the global variance, components under weight 0.01 pruned). pfl's per-row statistics are
  a Python loop over rows; the script swaps in a vectorised ``get_mixture_statistics`` (the same arithmetic,
  checked against pfl's own on one client at start-up, printed);
- fedmm ``method="pooled-em"`` and ``method="fedem"`` at their defaults.

Error: mean over the true components of the distance to the estimated mean after the best matching
(Hungarian; a true component left unmatched when a fit pruned some counts its distance to the nearest
estimate); held-out log-likelihood per row on 10,000 fresh rows from fresh clients of the same design (the
generator's next clients), under each fit's population mixture (FedEM: the clients' proportions averaged).

Private (client-level, central noise, delta 1e-6, the roster public): pfl's GMM with its
``GaussianMechanism`` calibrated by its ``PLDPrivacyAccountant`` for the 40 iterations (sampling probability 1),
wrapped as ``CentrallyAppliedPrivacyMechanism``; its clipping bound a multiple (1/2, 1, 2) of a typical
client's statistics' norm ``sqrt((c n)^2 / 5 + 3 n d)`` with ``responsibility_scale`` c = 1 or 0.1 (the same
six settings as validation/privacy.py's pfl-style baseline), the best of the six reported (chosen on the
results, in pfl's favour: the fewest failed fits, a fit failing when pfl prunes every component, then the lowest
mean error over the finished fits; each seed's best setting printed too). pfl's neighbouring relation is one
client added or removed (sensitivity: the clip); fedmm's is one client's rows replaced (docs/privacy.md;
sensitivity: twice the clip), so pfl is reported both as it is and calibrated for replace-one (its noise doubled,
``GaussianMechanism(clip, 2 sigma)``). Against fedmm's ``FederatedGaussianMixture(5, method="fedem",
privacy=DifferentialPrivacy(epsilon, 1e-6, bounds=(-7, 7)))`` and the same with ``method="fedgrem"`` (issue 59,
item 3), at their defaults (``clip=1``, ``rounds="auto"``) and at the best of ``clip`` 1, 2 and 4 on the mean
error (chosen on the results, as pfl's settings are). A diagnostic line, both at epsilon 1e6 (the same private
schedule, clip, start and rounds, the noise multiplier 0.0047 against 8.02 at epsilon 4), separates what the
noise costs from what the private schedule itself reaches (docs/research/privacy.md, issue 59 item 3).

Last, the pfl-style reimplementation in validation/privacy.py (``pfl_style``) against real pfl: its statistics
vector against pfl's on one client, the noise multipliers of the two accountants, and the errors of both,
replace-one, on design B at one setting.

    python validation/pfl_baseline.py [--quick] [--seeds N] [--designs A B] [--epsilons 4 8]
    python validation/pfl_baseline.py --no-plain --no-check --designs B --seeds 3   # item 3's private table
    python validation/pfl_baseline.py ... --settings 1/0.5 1/1 1/2   # pfl's scale-1 settings only

Needs pfl (``pip install 'fedmm[pfl]'``, a validation-only extra); without it the script says so and exits 0.
"""

import argparse
import functools
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.special import logsumexp
from sklearn.mixture import GaussianMixture

sys.path.insert(0, str(Path(__file__).parent))
from fedem_optimum import DESIGNS, N_COMPONENTS, make_shared_components  # noqa: E402
from fedmm import FederatedGaussianMixture  # noqa: E402
from fedmm.engine import DivergenceError  # noqa: E402

try:
    import pfl  # noqa: F401
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.algorithm.expectation_maximization_gmm import (EMGMMHyperParams, ExpectationMaximizationGMM,
                                                            make_compute_new_num_components)
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.internal.distribution import LogFloat
    from pfl.model.gaussian_mixture_model import GaussianMixtureModel, GMMHyperParams
    from pfl.privacy import CentrallyAppliedPrivacyMechanism, GaussianMechanism, PLDPrivacyAccountant
    from pfl.stats import MappedVectorStatistics
except ImportError:
    pfl = None

ITERATIONS, SPLIT_EVERY = 40, 4
DELTA, BOUNDS = 1e-6, (-7.0, 7.0)
HELD_OUT = 10_000
#: pfl's DP settings: (responsibility_scale, clip as a multiple of a typical client's statistics' norm).
SETTINGS = tuple((scale, factor) for scale in (1.0, 0.1) for factor in (0.5, 1.0, 2.0))


def _vectorised_statistics(self, points, variance_scale, responsibility_scale):
    """pfl's ``GaussianMixtureModel.get_mixture_statistics`` (its ``_mixture_statistics_single_point`` summed
    over the rows), vectorised over rows: the same statistics, keys, weight and likelihood."""
    X = np.asarray(points, dtype=float)
    weights = np.array([w for w, _ in self.components])
    mu = np.stack([g.mean for _, g in self.components])
    var = np.stack([g.variance for _, g in self.components])
    log_p = (np.log(weights) - 0.5 * np.log(2 * np.pi * var).sum(1)
             - 0.5 * (((X[:, None] - mu) ** 2) / var).sum(2))
    log_lik = logsumexp(log_p, axis=1)
    g = np.exp(log_p - log_lik[:, None])
    resp = g.sum(0)
    stats = {}
    for r in range(len(weights)):
        stats[f"responsibility-{r}"] = np.array([responsibility_scale * resp[r]])
        stats[f"mean-{r}"] = (g[:, r] @ X - resp[r] * mu[r]) / np.sqrt(var[r])
        stats[f"variance-{r}"] = variance_scale * (g[:, r] @ X ** 2 - resp[r] * (mu[r] ** 2 + var[r])) / var[r]
    return LogFloat(+1, float(log_lik.sum())), MappedVectorStatistics(stats, weight=len(X))


def check_vectorised(X):
    """Largest difference between pfl's own statistics and the vectorised ones on one client, 5 components."""
    params = GMMHyperParams()
    model = GaussianMixtureModel(X.shape[1], cached_model_train_params=params).mix_up(1).mix_up(2).mix_up(1)
    lik_a, ref = _original_statistics(model, X, 1.0, 0.1)
    lik_b, vec = _vectorised_statistics(model, X, 1.0, 0.1)
    diff = max(np.abs(ref[key] - vec[key]).max() for key in ref.keys())
    return len(model.components), diff, abs(lik_a.log_value - lik_b.log_value), ref.weight == vec.weight


@functools.lru_cache(maxsize=None)
def pfl_accountant_sigma(epsilon):
    """pfl's noise multiplier (noise sd over clip) for ``ITERATIONS`` releases at (epsilon, DELTA), add/remove."""
    return PLDPrivacyAccountant(num_compositions=ITERATIONS, sampling_probability=1.0, mechanism="gaussian",
                                epsilon=epsilon, delta=DELTA).cohort_noise_parameter


def typical_norm(n, d, scale):
    return np.sqrt((scale * n) ** 2 / N_COMPONENTS + 3 * n * d)


def fit_pfl(X, seed, epsilon=None, setting=(1.0, 1.0), noise_factor=1.0):
    """pfl's fit on the clients ``X``: ``(weights (R',), means (R', d), variances (R', d))``; ``epsilon`` None:
    no privacy; ``noise_factor`` 2: the noise for one client's rows replaced."""
    np.random.seed(seed)   # pfl's algorithm draws its noise seeds from numpy's global state
    scale, factor = setting
    users = {k: x for k, x in enumerate(X)}
    data = FederatedDataset.from_slices(users, get_user_sampler("minimize_reuse", list(users)))
    postprocessors = []
    if epsilon is not None:
        clip = factor * typical_norm(max(len(x) for x in X), X[0].shape[1], scale)
        mechanism = GaussianMechanism(clip, noise_factor * pfl_accountant_sigma(epsilon))
        postprocessors = [CentrallyAppliedPrivacyMechanism(mechanism)]
    backend = SimulatedBackend(training_data=data, val_data=None, postprocessors=postprocessors)
    model_params = GMMHyperParams(responsibility_scale=scale)
    algorithm_params = EMGMMHyperParams(
        central_num_iterations=ITERATIONS, evaluation_frequency=ITERATIONS, val_cohort_size=None,
        compute_cohort_size=lambda iteration, num_components: len(X),
        compute_new_num_components=make_compute_new_num_components(0, SPLIT_EVERY, N_COMPONENTS,
                                                                   step_components=1))
    model = GaussianMixtureModel(X[0].shape[1], cached_model_train_params=model_params)
    model = ExpectationMaximizationGMM().run(algorithm_params=algorithm_params, backend=backend, model=model,
                                             model_train_params=model_params, model_eval_params=model_params,
                                             send_metrics_to_platform=False)
    weights = np.array([w for w, _ in model.components])
    return (weights / weights.sum(), np.stack([g.mean for _, g in model.components]),
            np.stack([g.variance for _, g in model.components]))


def error(estimate, means):
    """Mean over the true components of the distance to their matched estimate (Hungarian); with fewer
    estimates than components, an unmatched true component counts its distance to the nearest estimate."""
    distance = np.linalg.norm(np.asarray(estimate)[:, None] - means[None], axis=-1)
    rows, cols = linear_sum_assignment(distance)
    per = distance.min(0)
    per[cols] = distance[rows, cols]
    return float(per.mean())


def held_out(weights, mu, var, X):
    """Log-likelihood per row of ``X`` under the diagonal mixture (weights, mu, var)."""
    log_p = (np.log(np.maximum(weights, 1e-300)) - 0.5 * np.log(2 * np.pi * var).sum(1)
             - 0.5 * (((X[:, None] - mu) ** 2) / var).sum(2))
    return float(logsumexp(log_p, axis=1).mean())


def data(design, seed):
    """Training clients, true means and ``HELD_OUT`` fresh rows (the generator's next clients, same means)."""
    K, n = DESIGNS[design]
    extra = -(-HELD_OUT // n)
    X, means = make_shared_components(K + extra, n, seed)
    return X[:K], means, np.concatenate(X[K:])[:HELD_OUT]


def _fedmm(X, seed, **options):
    gm = FederatedGaussianMixture(N_COMPONENTS, random_state=seed, **options).fit(X)
    return gm.weights_.mean(0), gm.center_, gm.covariances_.mean(0), gm


def plain(design, seed):
    """{method: (error, held-out ll, seconds, components)} without privacy."""
    X, means, fresh = data(design, seed)
    out = {}
    fits = {"scikit-learn (pooled rows)": lambda: _sklearn(X, seed),
            "pfl 0.6 ExpectationMaximizationGMM": lambda: fit_pfl(X, seed),
            'fedmm method="pooled-em"': lambda: _fedmm(X, seed, method="pooled-em")[:3],
            'fedmm method="fedem"': lambda: _fedmm(X, seed, method="fedem")[:3]}
    for name, fit in fits.items():
        start = time.perf_counter()
        w, mu, var = fit()
        out[name] = error(mu, means), held_out(w, mu, var, fresh), time.perf_counter() - start, len(w)
    return out


def _sklearn(X, seed):
    sk = GaussianMixture(N_COMPONENTS, covariance_type="diag", random_state=seed).fit(np.concatenate(X))
    return sk.weights_, sk.means_, sk.covariances_


def private(design, seed, epsilons, settings):
    """{(label, epsilon[, setting]): (error, components or rounds)} under client-level DP; pfl's per setting,
    fedmm's FedEM and FedGrEM once each, and FedEM at ``NOISELESS``."""
    X, means, _ = data(design, seed)
    out = {}
    for epsilon in epsilons:
        for noise_factor, relation in ((1.0, "add/remove"), (2.0, "replace-one")):
            for setting in settings:
                try:
                    w, mu, _ = fit_pfl(X, seed, epsilon, setting, noise_factor)
                    out[f"pfl {relation}", epsilon, setting] = error(mu, means), len(w)
                except Exception:   # every component pruned, or a negative variance: a failed fit
                    out[f"pfl {relation}", epsilon, setting] = np.inf, 0
        for method in FEDMM_PRIVATE:
            for clip in FEDMM_CLIPS:
                out[method, epsilon, clip] = _fedmm_private(X, means, seed, method, epsilon, clip)
    for method in FEDMM_PRIVATE:
        out[method, NOISELESS, 1.0] = _fedmm_private(X, means, seed, method, NOISELESS, 1.0)
    return out


#: fedmm's private methods in the table, their clips (1 the default), and the noiseless-schedule diagnostic's epsilon.
FEDMM_PRIVATE, FEDMM_CLIPS, NOISELESS = ("fedem", "fedgrem"), (1.0, 2.0, 4.0), 1e6


def _fedmm_private(X, means, seed, method, epsilon, clip):
    """(error, rounds run) of fedmm's ``method`` under client-level central DP at (epsilon, DELTA) with
    ``clip``; a divergence counts as a failed fit (inf, 0)."""
    from fedmm.privacy import DifferentialPrivacy
    try:
        gm = _fedmm(X, seed, method=method, privacy=DifferentialPrivacy(epsilon, DELTA, bounds=BOUNDS, clip=clip))[3]
        return error(gm.center_, means), int(np.max(gm.n_iter_))
    except DivergenceError:
        return np.inf, 0


def _fmt(values):
    values = np.asarray(values, dtype=float)
    return f"{values.mean():.3f} ({values.max():.3f})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="one seed, design B only at 200 clients, epsilon 8, two pfl settings")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--designs", nargs="+", default=["A", "B"], choices=sorted(DESIGNS))
    parser.add_argument("--epsilons", nargs="+", type=float, default=[4.0, 8.0])
    parser.add_argument("--no-private", action="store_true", help="the plain table and the checks only")
    parser.add_argument("--no-plain", action="store_true", help="the private table and the checks only")
    parser.add_argument("--no-check", action="store_true", help="skip the pfl-style check")
    parser.add_argument("--settings", nargs="+", default=None,
                        help="pfl's DP settings as scale/factor, e.g. 1/1 0.1/2 (default: the six)")
    args = parser.parse_args(argv)
    if pfl is None:
        print("pfl not installed: pip install 'fedmm[pfl]'")
        return 0
    global _original_statistics
    _original_statistics = GaussianMixtureModel.get_mixture_statistics
    GaussianMixtureModel.get_mixture_statistics = _vectorised_statistics
    warnings.simplefilter("ignore")
    seeds, designs, epsilons, settings = range(args.seeds), args.designs, args.epsilons, SETTINGS
    if args.settings:
        settings = tuple(tuple(float(v) for v in s.split("/")) for s in args.settings)
    if args.quick:
        DESIGNS["B"] = (200, 50)
        seeds, designs, epsilons, settings = range(1), ["B"], [8.0], ((1.0, 1.0), (0.1, 1.0))
    print(f"pfl {pfl.__version__}; seeds {list(seeds)}")

    X, _, _ = data("B", 0)
    k, diff, dlik, same_weight = check_vectorised(X[0])
    print(f"vectorised pfl statistics against pfl's own on one client ({len(X[0])} rows, {k} components): "
          f"largest difference {diff:.1e}, likelihood {dlik:.1e}, weights equal: {same_weight}")

    if not args.no_plain:
        plain_table(seeds, designs)
    if not args.no_private:
        private_tables(seeds, designs, epsilons, settings)
    if not args.no_check:
        check_pfl_style(seeds, epsilons)
    return 0


def plain_table(seeds, designs):
    print(f"\n## Without privacy: error of the means, mean over seeds (worst seed); held-out log-likelihood per "
          f"row on {HELD_OUT:,} fresh rows; seconds per fit\n")
    header = "| method | " + " | ".join(f"{d}: error (worst) | {d}: held-out ll | {d}: s" for d in designs) + " |"
    print(header + "\n|---|" + "---|---|---|" * len(designs))
    results = {d: [plain(d, seed) for seed in seeds] for d in designs}
    for name in results[designs[0]][0]:
        cells = []
        for d in designs:
            runs = [r[name] for r in results[d]]
            pruned = sum(r[3] < N_COMPONENTS for r in runs)
            cells += [_fmt([r[0] for r in runs]) + (f", {pruned} pruned" if pruned else ""),
                      f"{np.mean([r[1] for r in runs]):.2f}", f"{np.mean([r[2] for r in runs]):.2f}"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for d in designs:
        print(f"{d} per seed: " + "; ".join(
            f"{name}: " + ", ".join(f"{r[name][0]:.3f}" for r in results[d])
            for name in results[d][0]))



def private_tables(seeds, designs, epsilons, settings):
    if True:
        print(f"\n## Client-level central DP, delta {DELTA:g}, {ITERATIONS} releases: error of the means, mean over "
              f"seeds (worst seed)\npfl: PLD accountant, GaussianMechanism, best of its settings "
              f"(responsibility_scale/clip over the typical norm: fewest failed fits, then the mean over the "
              f"finished ones; a fit fails when every component is pruned); pfl's guarantee is add/remove (noise for "
              f"sensitivity = clip); fedmm's is replace-one (the roster public; noise for 2 clip); 'pfl replace-one'"
              f" is pfl with its noise doubled, the like-for-like comparison.")
        print("noise multipliers (sd / sensitivity) for 40 releases: " + ", ".join(
            f"epsilon {e:g}: pfl PLD {pfl_accountant_sigma(e):.3f}" for e in epsilons))
        for d in designs:
            runs = [private(d, seed, epsilons, settings) for seed in seeds]
            print(f"\n{d}: {DESIGNS[d][0]} clients x {DESIGNS[d][1]} rows\n")
            print("| epsilon | pfl add/remove (as pfl states it): best setting | pfl replace-one: best setting | "
                  "fedmm FedEM (replace-one), defaults | fedmm FedGrEM (replace-one), defaults | fedmm FedEM, best "
                  "clip | fedmm FedGrEM, best clip |\n|---|---|---|---|---|---|---|")
            for epsilon in epsilons:
                cells = [_pfl_cell(runs, relation, epsilon, settings) for relation in PFL_RELATIONS]
                cells += _fedmm_cells(runs, epsilon)
                print(f"| {epsilon:g} | " + " | ".join(cells) + " |")
            print(f"\n{d} per seed, defaults: " + "; ".join(
                f"epsilon {e:g}: " + ", ".join(f"{m} " + "/".join(f"{r[m, e, 1.0][0]:.3f}" for r in runs)
                                               for m in FEDMM_PRIVATE)
                for e in list(epsilons) + [NOISELESS]) + f" (epsilon {NOISELESS:g}: the schedule without its noise)")
            print(f"{d} per seed, pfl's best setting on each seed (failed: every setting failed): " + "; ".join(
                f"{relation} epsilon {e:g}: " + ", ".join(_pfl_seed_best(r, relation, e, settings) for r in runs)
                for relation in PFL_RELATIONS for e in epsilons))


PFL_RELATIONS = ("pfl add/remove", "pfl replace-one")


def _finished(errors):
    """(failed fits, mean error over the finished ones; inf when none finished)."""
    ok = errors[np.isfinite(errors)]
    return len(errors) - len(ok), (ok.mean() if len(ok) else np.inf)


def _pfl_cell(runs, relation, epsilon, settings):
    """pfl's cell: its best setting (fewest failed fits, then the lowest mean error over the fits that
    finished), with each setting's mean over its finished fits and its failures in brackets."""
    errs = {s: np.array([r[relation, epsilon, s][0] for r in runs]) for s in settings}
    best = min(settings, key=lambda s: _finished(errs[s]))
    failed, _ = _finished(errs[best])
    pruned = sum(0 < r[relation, epsilon, best][1] < N_COMPONENTS for r in runs)
    if failed == len(runs):
        head = "every fit failed"
    else:
        head = (_fmt(errs[best][np.isfinite(errs[best])]) + f" at {best[0]:g}/{best[1]:g}"
                + (f", {failed} of {len(runs)} failed" if failed else "") + (f", {pruned} pruned" if pruned else ""))
    each = []
    for s in settings:
        n_failed, mean = _finished(errs[s])
        each.append(f"{s[0]:g}/{s[1]:g}: " + ("failed" if n_failed == len(runs) else f"{mean:.3f}"
                                              + (f" ({n_failed} failed)" if n_failed else "")))
    return head + " [" + ", ".join(each) + "]"


def _pfl_seed_best(run, relation, epsilon, settings):
    """One seed's best pfl fit over the settings: 'error at scale/factor', or 'failed'."""
    best = min(settings, key=lambda s: run[relation, epsilon, s][0])
    e = run[relation, epsilon, best][0]
    return f"{e:.3f} at {best[0]:g}/{best[1]:g}" if np.isfinite(e) else "failed"


def _fedmm_cells(runs, epsilon):
    """fedmm's cells of one epsilon's row: each method at its default clip (with the rounds run), then at its
    best clip on the mean error (with every clip's mean)."""
    cells = [_fmt([r[m, epsilon, 1.0][0] for r in runs]) + f", {'/'.join(str(r[m, epsilon, 1.0][1]) for r in runs)}"
             f" rounds" for m in FEDMM_PRIVATE]
    for m in FEDMM_PRIVATE:
        errs = {c: [r[m, epsilon, c][0] for r in runs] for c in FEDMM_CLIPS}
        best = min(FEDMM_CLIPS, key=lambda c: np.mean(errs[c]))
        cells.append(f"{_fmt(errs[best])} at clip {best:g} ["
                     + ", ".join(f"{c:g}: {np.mean(errs[c]):.3f}" for c in FEDMM_CLIPS) + "]")
    return cells



def check_pfl_style(seeds, epsilons):
    """validation/privacy.py's pfl-style reimplementation against real pfl, replace-one, one setting."""
    from privacy import pfl_style
    from fedmm.privacy import noise_multiplier
    epsilon, setting = epsilons[-1], (1.0, 1.0)
    print(f"\n## pfl-style (validation/privacy.py) against real pfl: design B, epsilon {epsilon:g}, setting "
          f"{setting[0]:g}/{setting[1]:g}, both replace-one\nnoise multiplier for {ITERATIONS} releases: fedmm's "
          f"(RDP) {noise_multiplier(epsilon, DELTA, ITERATIONS):.3f}, pfl's (PLD) {pfl_accountant_sigma(epsilon):.3f}")
    X, means, _ = data("B", 0)
    model = GaussianMixtureModel(X[0].shape[1], cached_model_train_params=GMMHyperParams()).mix_up(4)
    w = np.array([c[0] for c in model.components])
    mu, var = (np.stack([getattr(c[1], a) for c in model.components]) for a in ("mean", "variance"))
    z, zmu, zvar = X[0] / BOUNDS[1], mu / BOUNDS[1], var / BOUNDS[1] ** 2   # pfl_style's units, its formula
    log_p = np.log(w) - 0.5 * (np.log(2 * np.pi * zvar).sum(1) + (((z[:, None] - zmu) ** 2) / zvar).sum(2))
    g = np.exp(log_p - log_p.max(1, keepdims=True))
    g /= g.sum(1, keepdims=True)
    ours = np.concatenate([g.sum(0), (g.T @ z - g.sum(0)[:, None] * zmu).ravel() / np.sqrt(zvar).ravel(),
                           ((g.T @ z ** 2 - g.sum(0)[:, None] * (zmu ** 2 + zvar)) / zvar).ravel()])
    _, ref = _original_statistics(model, X[0], 1.0, 1.0)
    k = len(w)
    theirs = np.concatenate([[ref[f"responsibility-{r}"][0] for r in range(k)]]
                            + [ref[f"mean-{r}"] for r in range(k)] + [ref[f"variance-{r}"] for r in range(k)])
    print(f"one client's statistics, pfl-style's formula against pfl's own: largest difference "
          f"{np.abs(ours - theirs).max():.1e} (norms {np.linalg.norm(ours):.2f} / {np.linalg.norm(theirs):.2f})")
    errs = {"pfl-style": [], "real pfl": []}
    for seed in seeds:
        X, means, _ = data("B", seed)
        errs["pfl-style"].append(error(pfl_style(X, epsilon, setting, seed, ITERATIONS)[1], means))
        try:
            errs["real pfl"].append(error(fit_pfl(X, seed, epsilon, setting, 2.0)[1], means))
        except Exception:
            errs["real pfl"].append(np.inf)
    print("error per seed: " + "; ".join(f"{k}: " + ", ".join(f"{e:.3f}" for e in v) for k, v in errs.items())
          + "; means " + ", ".join(f"{k} {np.mean(v):.3f}" for k, v in errs.items()))


_original_statistics = None

if __name__ == "__main__":
    sys.exit(main())
