"""Simulation studies of estimation error: a (method x setting x replication) grid on the public API.

A study fits every method on the same simulated data sets (replication ``i`` of
a setting uses seed ``random_state + i`` for the data, whatever the method), in
parallel (joblib) with a progress bar (tqdm), and returns one tidy row per fit:
the setting, the method, the paper's errors (maximum over the non-outlier
clients, FedGrEM Sec. 4.1, Fig. 3) and their means, the mis-clustering rate
and adjusted Rand index on held-out data, how the fit converged, and what its
rounds sent (``messages``, ``floats``; the kept run's, ``docs/decentralized.md``).
"""

import csv
import warnings
from contextlib import contextmanager

import numpy as np
from joblib import Parallel, delayed, parallel_config
from sklearn.exceptions import ConvergenceWarning
from tqdm.auto import tqdm

from . import threads
from .data import SingularComponentWarning
from .estimators import get_model, simulated_models
from .methods import METHODS, Method
from .metrics import adjusted_rand_index, estimation_errors, misclustering_rate
from .simulate import snr

__all__ = ["ALL_METHODS", "BACKENDS", "METRIC_NAMES", "run_study", "write_csv", "read_csv", "summarize", "format_table", "plot_study",
           "plot_timings"]

#: Where a study's fits run: joblib's local processes, or an existing Dask or Ray cluster through joblib.
BACKENDS = ("loky", "dask", "ray")

#: Fig. 3's methods, in its order (FedGMM is not implemented).
ALL_METHODS = ("local-em", "local-grem", "fedem", "tgmm", "pooled-em", "pooled-grem", "fedgrem")


def paper_method(method):
    """The method a study fits for ``method``: a named FedGrEM or d-FedGrEM with the paper's penalty schedule
    and central weights (``penalty="paper"``, ``pooling_sizes="client"``: the simulated data follow the
    paper's model), any other name or method object as it is."""
    if method in ("fedgrem", "d-fedgrem"):
        return METHODS[method](penalty="paper", pooling_sizes="client")
    return method


def _one_fit(model, label, method, setting, seed, fit_options, n_threads=None):
    """Simulate replication ``seed`` of ``setting``, fit ``method`` on at most ``n_threads`` threads, score
    it (one row, the method called ``label``)."""
    with threads.limit(n_threads):
        return {"model": model, "method": label, **_fit_and_score(model, method, setting, seed, fit_options)}


def _fit_and_score(model, method, setting, seed, fit_options):
    design = dict(setting)
    h = design.pop("h", 0.0)
    cls = get_model(model)
    # The simulated data follow the paper's model (unit variances, unit noise): fit that model unless told
    # otherwise; the paper starts every federated method from local EM (App. B), FedEM included.
    common = dict(cls.simulation.options)
    if getattr(method, "name", method) == "fedem":
        common["init"] = "local-em"
    common.update(random_state=seed, **fit_options)
    with warnings.catch_warnings():
        # Non-convergence is recorded in the row (converged, n_iter), not printed once per fit.
        warnings.simplefilter("ignore", ConvergenceWarning)
        # So are singular and empty components (the row's singular_components, empty_components).
        warnings.simplefilter("ignore", SingularComponentWarning)
        *data, truth = cls.simulation.make(h=h, random_state=seed, **design)
        est = cls(truth.centers.shape[0], method=method, **common).fit(*data)
        theta_hat = est.params_.theta[..., :truth.theta.shape[-1]]   # the coefficients, without an intercept
        *test, labels = cls.simulation.sample(truth, 200, random_state=seed + 10 ** 6)
        predicted = [p.argmax(axis=1) for p in est.predict_proba(*test)]
    keep = np.flatnonzero(~truth.outliers)
    w_err, theta_err = estimation_errors(est.weights_, theta_hat, truth.weights, truth.theta)
    w_sep, _ = estimation_errors(est.weights_, theta_hat, truth.weights, truth.theta, matching="separate")
    mis = [misclustering_rate(labels[k], predicted[k]) for k in keep]
    ari = [adjusted_rand_index(labels[k], predicted[k]) for k in keep]
    return {**setting, "h": h,
            "h_over_snr": h / snr(truth), "seed": seed,
            "theta_error": float(theta_err[keep].max()), "weight_error": float(w_err[keep].max()),
            "weight_error_separate": float(w_sep[keep].max()), "theta_error_mean": float(theta_err[keep].mean()),
            "weight_error_mean": float(w_err[keep].mean()), "misclustering": float(np.mean(mis)),
            "ari": float(np.mean(ari)), "converged": bool(est.converged_), "n_iter": int(est.n_iter_),
            "singular_components": int(est.singular_components_[keep].sum()),
            "empty_components": int(est.empty_components_.sum()),
            "messages": int(est.history_["messages"].sum()), "floats": int(est.history_["floats"].sum())}


@contextmanager
def cluster(backend="loky", address=None):
    """Run the joblib calls inside on ``backend``: ``"loky"`` (local processes), ``"dask"`` (the Dask
    scheduler at ``address``, else the current ``dask.distributed`` client, else a new local cluster) or
    ``"ray"`` (the Ray cluster at ``address``, else the running one, else a local one). No scheduler of
    fedmm's own: the cluster engines do the scheduling (``docs/studies.md``)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}.")
    if backend == "loky":
        yield
        return
    extra = {"dask": "dask", "ray": "ray"}[backend]
    try:
        if backend == "dask":
            from dask.distributed import Client, default_client
        else:
            import ray
            from ray.util.joblib import register_ray
    except ImportError as error:
        raise ImportError(f"backend={backend!r} needs {extra}: pip install 'fedmm[{extra}]'.") from error
    if backend == "dask":
        try:
            client, own = (Client(address), True) if address else (default_client(), False)
        except ValueError:  # no client yet: start a local cluster for this study
            client, own = Client(), True
        try:
            with parallel_config(backend="dask"):
                yield
        finally:
            if own:
                client.close()
        return
    register_ray()
    if not ray.is_initialized():
        ray.init(address=address)
    with parallel_config(backend="ray"):
        yield


def run_study(model="gmm", methods=ALL_METHODS, settings=({"h": 0.0},), reps=5, random_state=0, fit_options=None,
              n_jobs=1, progress=False, backend="loky", address=None):
    """Fit every method on ``reps`` simulated data sets per setting.

    Parameters
    ----------
    model : str
        A model of :data:`fedmm.estimators.MODELS` whose estimator declares a simulation
        (:func:`fedmm.estimators.simulated_models`: ``"gmm"``, ``"mor"``).
    methods : sequence of str or method objects, dict, or "all"
        What the estimators' ``method=`` takes (:mod:`fedmm.methods`); a named FedGrEM or d-FedGrEM
        runs with the paper's penalty schedule and central weights (:func:`paper_method`). Rows name a
        method by its name, or by its key when ``methods`` is a dict ``{label: method}``; "all": Fig. 3's
        methods.
    settings : sequence of dict
        Arguments of the model's simulation (:func:`fedmm.simulate.make_federated_gmm` / ``_mor``) per
        setting (``h``, ``n_clients``, ``n_samples``, ``outlier_clients``, ...).
    reps : int
        Replications per setting; replication ``i`` uses seed ``random_state + i``
        for the data and the fit, so every method sees the same data.
    fit_options : dict, optional
        Extra estimator arguments (``n_init``, ``max_iter``, ...). Unless they say otherwise the fits
        use the paper's model (the simulation's options: ``covariance_type="identity"``, ``noise_variance=1.0``),
        as the simulated data follow it.
    n_jobs : int
        Parallel workers (joblib; -1: all cores, or all of a cluster's workers).
    progress : bool
        Show a tqdm progress bar.
    backend : {"loky", "dask", "ray"}
        Where the fits run (:func:`cluster`): this machine's cores, or an existing Dask or Ray cluster
        (``address``: its scheduler) through joblib. Every fit's seed is fixed by the grid, so the rows
        are the same on every backend.
    address : str, optional
        The cluster's scheduler address (``tcp://host:8786`` for Dask, ``host:6379`` or ``auto`` for Ray).

    Returns
    -------
    rows : list of dict
        One row per fit (see the module docstring).
    """
    methods = _labelled(ALL_METHODS if isinstance(methods, str) and methods == "all" else methods)
    if model not in simulated_models():
        raise ValueError(f"model must be one of {simulated_models()} (those whose estimators declare a simulation, "
                         f"fedmm.estimators.Simulation), got {model!r}.")
    jobs = [(label, method, setting, random_state + i) for setting in settings for i in range(reps)
            for label, method in methods.items()]
    # Each fit's share of the cores: joblib's processes have OMP_NUM_THREADS = cores // workers already
    # (fedmm.threads reads it); a task on a Dask or Ray cluster holds one of its worker's slots, one core.
    n_threads = None if backend == "loky" else 1
    tasks = (delayed(_one_fit)(model, label, m, s, seed, dict(fit_options or {}), n_threads)
             for label, m, s, seed in jobs)
    bar = tqdm(total=len(jobs), desc=f"{model} study", disable=not progress)
    rows = []
    # Ray's joblib backend returns all results at once (no generator): the bar then jumps at the end.
    with cluster(backend, address):
        for row in Parallel(n_jobs=n_jobs, return_as="list" if backend == "ray" else "generator")(tasks):
            rows.append(row)
            bar.update()
    bar.close()
    return rows


def _labelled(methods):
    """``{label: method}`` for a study's methods (checked: names of :data:`fedmm.methods.METHODS` or method
    objects), named FedGrEMs with the paper's options."""
    if not isinstance(methods, dict):
        methods = {m if isinstance(m, str) else m.name or type(m).__name__: m for m in methods}
    unknown = [m for m in methods.values() if not isinstance(m, Method) and m not in METHODS]
    if unknown:
        raise ValueError(f"Unknown method(s) {unknown}; choose from {list(METHODS)}, method objects, or 'all'.")
    return {label: paper_method(m) for label, m in methods.items()}


def write_csv(rows, path):
    """Write the rows as a tidy CSV table (one row per fit)."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def read_csv(path):
    """Read a study's CSV back into rows (numbers as floats, flags as bools)."""
    def parse(value):
        if value in ("True", "False"):
            return value == "True"
        try:
            return float(value)
        except ValueError:
            return value

    with open(path, newline="") as f:
        return [{k: parse(v) for k, v in row.items()} for row in csv.DictReader(f)]


#: What each recorded error is, for tables and figures.
METRIC_NAMES = {"theta_error": "error of the component parameters (Euclidean norm)",
                "weight_error": "error of the mixing proportions (max abs)",
                "misclustering": "mis-clustering rate"}


def summarize(rows, metric="theta_error", by="h"):
    """Mean and standard deviation of ``metric`` per (setting value, method): ``{(x, method): (mean, sd)}``."""
    groups = {}
    for row in rows:
        groups.setdefault((row[by], row["method"]), []).append(row[metric])
    return {key: (float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1 else 0.0)
            for key, v in groups.items()}


def format_table(rows, metric="theta_error", by="h"):
    """A text table: one line per setting value, one column per method, ``mean (sd)`` as the paper prints."""
    summary = summarize(rows, metric, by)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    xs = sorted({r[by] for r in rows})
    width = max(15, *(len(m) + 2 for m in methods))
    lines = [f"{by:>8}" + "".join(f"{m:>{width}}" for m in methods)]
    for x in xs:
        cells = "".join(f"{'%.3f (%.3f)' % summary[(x, m)]:>{width}}" for m in methods)
        lines.append(f"{x:>8.3g}{cells}")
    return "\n".join(lines)


def plot_study(rows, path, metrics=("weight_error", "theta_error"), title=None, by="h"):
    """Mean error against ``by`` (``"h"``, the table's axis, or ``"h_over_snr"``, Fig. 3's), one line per
    method, log scale. Saved to ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, ScalarFormatter

    methods = list(dict.fromkeys(r["method"] for r in rows))
    hs = sorted({r["h"] for r in rows})
    x = [np.mean([r[by] for r in rows if r["h"] == h]) for h in hs]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        summary = summarize(rows, metric)
        for i, m in enumerate(methods):
            # Distinct markers, line styles and sizes: EM and gradient EM often coincide, and one must not
            # hide the other.
            ax.plot(x, [summary[(h, m)][0] for h in hs], marker="osD^v<>p"[i % 8],
                    linestyle=("-", "--", "-.", ":")[i % 4], markersize=9 - 0.8 * i, label=m, alpha=0.85)
        ax.set_yscale("log")
        # Numbers on the log axis, not only powers of ten: the errors span less than a decade.
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter() if len(ax.get_yticks()) < 3 else plt.NullFormatter())
        ax.set_xlabel({"h": "h (distance of each client's parameters from the centre)",
                       "h_over_snr": "h / SNR"}.get(by, by))
        ax.set_title(METRIC_NAMES.get(metric, metric), fontsize=10)
        ax.set_ylabel("max over honest clients (mean over reps)")
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_timings(x, series, xlabel, path):
    """Seconds against a size on log-log axes (the benchmarks' figures): ``series`` is a list of
    ``(seconds, style, label)``, one value per ``x``. Saved to ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for seconds, style, label in series:
        ax.plot(x, seconds, style, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("seconds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
