"""The ``fedmm`` command line: ``fedmm demo`` and ``fedmm simulate``."""

from argparse import ArgumentParser, ArgumentTypeError
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .estimators import simulated_models
from .methods import METHODS
from .simulate import PAPER_CENTERS
from .studies import ALL_METHODS, BACKENDS, METRIC_NAMES, format_table, plot_study, run_study, write_csv
from .theory import MODELS as THEORY_MODELS

DEMO_METHODS = ("fedgrem", "fedem", "tgmm", "local-em", "local-grem", "pooled-em", "pooled-grem")
#: The most values of ``h`` a study takes: each is a setting of every method and replication.
MAX_H_VALUES = 1000


def demo(reps=3, out=".", h_values=(0.0, 0.5, 1.0, 1.5, 2.0), random_state=0, n_jobs=-1):
    """FedGrEM against its peers on App. B.1's GMM design (K = 10, n = 150, d = 10, R = 5, one outlier client).

    Prints the mean (sd) over replications of the maximum error over the
    non-outlier clients, per h, for the means and the mixing proportions, and
    writes ``fedmm-demo.png``. Fits run on all cores (``n_jobs=-1``), with a progress bar.
    """
    start = time.perf_counter()
    settings = [{"h": h, "outlier_clients": (9,)} for h in h_values]
    print(f"fedmm demo: {len(DEMO_METHODS)} methods x {len(h_values)} values of h x {reps} replications on the "
          "FedGrEM paper's GMM design (App. B.1)", flush=True)
    rows = run_study("gmm", DEMO_METHODS, settings, reps, random_state,
                     fit_options={"n_init": 3, "max_iter": 1000, "tol": 1e-5}, n_jobs=n_jobs, progress=True)
    print(f"\nK = 10 clients (client 9 an outlier drawing N(2, 3 I)), n = 150 samples each, d = 10, R = 5 "
          "components; every client's means sit at distance h from the common centres.\n"
          f"Each cell: mean (sd) over {reps} replications of the largest error over the 9 honest clients.")
    for metric in ("theta_error", "weight_error"):
        print(f"\n{METRIC_NAMES[metric]}, max over honest clients")
        print(format_table(rows, metric))
    path = plot_study(rows, Path(out) / "fedmm-demo.png", title="FedGrEM and its peers (GMM, one outlier client)")
    print(f"\nfigure: {path}  ({time.perf_counter() - start:.1f} s)")
    return rows


def parse_range(text):
    """``"0:2:0.25"`` -> 0, 0.25, ..., 2 (stop included); ``"0.5"`` -> 0.5; ``"0,1,3"`` -> 0, 1, 3.

    Raises ``argparse.ArgumentTypeError`` (one line, for the command line) on anything else, on a
    step that is not positive, on negative values (``h`` is a distance) and on a range of more than
    :data:`MAX_H_VALUES` values.
    """
    try:
        if ":" in text:
            start, stop, step = (float(v) for v in text.split(":"))
            if not step > 0 or stop < start:
                raise ArgumentTypeError(f"{text!r}: start:stop:step needs step > 0 and stop >= start")
            if (stop - start) / step >= MAX_H_VALUES:   # before np.arange allocates them
                raise ArgumentTypeError(f"{text!r} has more than {MAX_H_VALUES} values; use a larger step")
            values = list(np.round(np.arange(start, stop + step / 2, step), 10))
        else:
            values = [float(v) for v in text.split(",")]
    except ValueError:
        raise ArgumentTypeError(f"{text!r} is not start:stop:step (e.g. 0:2:0.25) or a list a,b,c of numbers") from None
    if not all(np.isfinite(values)) or min(values) < 0:
        raise ArgumentTypeError(f"{text!r}: values must be finite and >= 0")
    return values


def _number(kind, low=None, high=None, *, low_open=False, high_open=False):
    """An argparse type: a ``kind`` (int or float) in the given range, with a one-line error otherwise."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        too_low = low is not None and (value <= low if low_open else value < low)
        too_high = high is not None and (value >= high if high_open else value > high)
        if too_low or too_high or not np.isfinite(value):
            interval = (f"{'(' if low_open or low is None else '['}{-np.inf if low is None else low:.4g}, "
                        f"{np.inf if high is None else high:.4g}{')' if high_open or high is None else ']'}")
            raise ArgumentTypeError(f"{value} is not in {interval}")
        return value
    return parse


class _Parser(ArgumentParser):
    """argparse with every error on one line (``fedmm <command>: error: ...``), exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _check_out(parser, folder):
    """Make ``folder`` and write a file in it, or fail as argparse does: before a study runs, not after."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        parser.error(f"argument --out: cannot write to {folder!r}: {error.strerror or error}")


def simulate(model, h_values, reps, methods, out, n_clients=10, n_samples=150, n_outliers=1, n_init=5,
             max_iter=1000, tol=1e-5, n_jobs=1, random_state=0, backend="loky", address=None, penalty="paper"):
    """Run a study on the paper's design (App. B.1) and write ``results.csv``, ``summary.txt`` and ``study.png``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    outliers = tuple(range(n_clients - n_outliers, n_clients))
    settings = [{"h": h, "n_clients": n_clients, "n_samples": n_samples, "outlier_clients": outliers}
                for h in h_values]
    # FedGrEM and d-FedGrEM with the paper's central weights and the chosen penalty (the study's default).
    methods = {m: METHODS[m](penalty=penalty, pooling_sizes="client") if m in ("fedgrem", "d-fedgrem") else m
               for m in methods}
    rows = run_study(model, methods, settings, reps, random_state,
                     fit_options={"n_init": n_init, "max_iter": max_iter, "tol": tol},
                     n_jobs=n_jobs, progress=True, backend=backend, address=address)
    write_csv(rows, out / "results.csv")
    text = [f"{model.upper()}, K={n_clients} ({n_outliers} outlier), n={n_samples}, {reps} replications per h; "
            "mean (sd) of the max error over the non-outlier clients"]
    for metric in ("theta_error", "weight_error", "misclustering"):
        text += ["", metric, format_table(rows, metric)]
    (out / "summary.txt").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    figure = plot_study(rows, out / "study.png", title=f"{model.upper()} study")
    print(f"\nwrote {out / 'results.csv'}, {out / 'summary.txt'}, {figure}")
    return rows


def _parser():
    """The command line's parser, and its commands' parsers by name."""
    from . import __version__

    parser = _Parser(prog="fedmm", description="Federated mixture models.")
    parser.add_argument("--version", action="version", version=f"fedmm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    count, positive = _number(int, 1), _number(float, 0, low_open=True)
    p_demo = sub.add_parser("demo", help="run the built-in simulation study, print its table, write its figure")
    p_demo.add_argument("--reps", type=count, default=3, help="replications per h (default 3)")
    p_demo.add_argument("--out", default=".", help="folder for fedmm-demo.png (default: current folder)")
    p_demo.add_argument("--seed", type=_number(int, 0), default=0, help="random seed (default 0)")
    _add_simulate(sub, count)
    p_flower = sub.add_parser("flower-demo", help="the paper's GMM design over Flower clients, simulated or each "
                              "a process of its own (flwr run; needs the 'flower' extra)")
    p_flower.add_argument("--model", choices=simulated_models(), default="gmm")
    p_flower.add_argument("--clients", type=_number(int, 2), default=None,
                          help="clients (default 10; 3 with --processes, where every query starts a process per "
                               "client)")
    p_flower.add_argument("--samples", type=count, default=150,
                          help=f"samples per client, at least the design's {len(PAPER_CENTERS)} components "
                               "(default 150)")
    p_flower.add_argument("--method", choices=("fedgrem", "fedem", "pooled-grem"), default="fedgrem")
    p_flower.add_argument("--out", default=None, help="working folder (default: a new temporary one)")
    p_flower.add_argument("--seed", type=_number(int, 0), default=0, help="random seed (default 0)")
    p_flower.add_argument("--processes", action="store_true",
                          help="a SuperLink and a SuperNode per client, each a process of its own on this machine, "
                               "talking over the network (a line per query)")
    p_flower.add_argument("--tls", action="store_true",
                          help="with --processes: HTTPS under a certificate authority made for the run")
    p_bounds = sub.add_parser("bounds", help="the terms of FedGrEM's error bound and the dominant one")
    p_bounds.add_argument("--model", choices=THEORY_MODELS, default="gmm")
    for name, kind, default, text in [
            ("n", count, 150, "samples per client"), ("K", count, 10, "number of clients"),
            ("d", count, 10, "dimension"), ("R", count, 5, "number of components"),
            ("h", _number(float, 0), 0.0, "similarity level h >= 0"),
            ("eps", _number(float, 0, 1 / 3, high_open=True), 0.0,
             "fraction of outlier clients, in [0, 1/3) (Theorem A.8 needs eps < 1/3)"),
            ("T", count, 1000, "rounds"), ("delta", _number(float, 0, 1, low_open=True, high_open=True), 0.05,
                                           "failure probability, in (0, 1)"),
            ("M", positive, 1.0, "bound on the parameters' norm"), ("cw", positive, 1.0, "lower bound of the weights"),
            ("kappa0", _number(float, 0, 1, low_open=True, high_open=True), 0.5, "contraction rate, in (0, 1)")]:
        p_bounds.add_argument(f"--{name}", type=kind, default=default, help=f"{text} (default {default:g})")
    return parser, sub.choices


def _add_simulate(sub, count):
    """``fedmm simulate``'s parser."""
    p_sim = sub.add_parser("simulate", help="a simulation study on the FedGrEM paper's design (App. B.1)")
    p_sim.add_argument("--model", choices=simulated_models(), default="gmm")
    p_sim.add_argument("--h", type=parse_range, default="0:2:0.25",
                       help="heterogeneity levels >= 0: start:stop:step, or a,b,c (default 0:2:0.25)")
    p_sim.add_argument("--reps", type=count, default=10, help="replications per h (default 10)")
    p_sim.add_argument("--methods", default="all", help=f"comma-separated from {', '.join(sorted(METHODS))}, or "
                       f"'all' (Fig. 3's: {', '.join(ALL_METHODS)})")
    p_sim.add_argument("--out", default="fedmm-study", help="output folder (default fedmm-study)")
    p_sim.add_argument("--clients", type=_number(int, 2), default=10, help="number of clients K >= 2 (default 10)")
    p_sim.add_argument("--samples", type=count, default=150,
                       help=f"samples per client, at least the design's {len(PAPER_CENTERS)} components (default 150)")
    p_sim.add_argument("--outliers", type=_number(int, 0), default=1,
                       help="number of outlier clients (the last ones), fewer than half the clients (default 1)")
    p_sim.add_argument("--n-init", type=count, default=5, help="starts per fit (default 5)")
    p_sim.add_argument("--penalty", choices=("paper", "sure", "sure-floored", "auto"), default="paper",
                       help="FedGrEM's penalty: the paper's schedule (default), chosen every round by SURE, SURE's "
                            "choice never below the schedule, or more pooling chosen by cross-validation "
                            "(docs/units.md)")
    p_sim.add_argument("--jobs", type=int, default=1,
                       help="parallel workers (-1: all cores or cluster workers; not 0) (default 1)")
    p_sim.add_argument("--backend", choices=BACKENDS, default="loky",
                       help="where the fits run: local processes (default), or a Dask or Ray cluster (extras "
                            "'dask', 'ray')")
    p_sim.add_argument("--address", default=None,
                       help="the cluster's scheduler (tcp://host:8786 for Dask, host:6379 or auto for Ray); "
                            "default: a running or new local one")
    p_sim.add_argument("--seed", type=_number(int, 0), default=0, help="random seed (default 0)")


def _bounds(args):
    """``fedmm bounds``: the terms of FedGrEM's error bound, and whether federation helps."""
    from .theory import bound, federation_helps
    setting = dict(model=args.model, n=args.n, K=args.K, d=args.d, R=args.R, h=args.h, eps=args.eps, T=args.T,
                   delta=args.delta, M=args.M, c_w=args.cw, kappa0=args.kappa0)
    print(bound(**setting))
    helps, ratio = federation_helps(**setting)
    print(f"federation {'helps' if helps else 'does not help'}: bound / local rate = {ratio:.3g} "
          "(absolute constants 1; see docs/theory.md)")
    return 0


def _flower_demo(parser, p_flower, args):
    """``fedmm flower-demo``: the paper's design over Flower clients."""
    try:
        from .flower.demo import flower_demo
    except ImportError as error:
        parser.error(f"{error}")
    if args.tls and not args.processes:
        p_flower.error("argument --tls: only with --processes (the simulation runs in one machine's memory)")
    if args.out is not None:
        _check_out(p_flower, args.out)
    clients = args.clients or (3 if args.processes else 10)
    flower_demo(clients, args.samples, args.method, args.out, args.seed, model=args.model,
                processes=args.processes, tls=args.tls)
    return 0


def main(argv=None):
    parser, commands = _parser()
    args = parser.parse_args(argv)
    if args.command in ("simulate", "flower-demo") and args.samples < len(PAPER_CENTERS):
        commands[args.command].error(
            f"argument --samples: {args.samples} samples per client; every client fits the design's "
            f"{len(PAPER_CENTERS)} components from its own rows (local EM, the starts), so give at least "
            f"{len(PAPER_CENTERS)}")
    if args.command == "simulate":
        p_sim = commands["simulate"]
        if 2 * args.outliers >= args.clients:
            p_sim.error(f"argument --outliers: {args.outliers} outliers among {args.clients} clients; fewer than "
                        "half the clients may be outliers")
        if args.jobs == 0:
            p_sim.error("argument --jobs: 0 workers; give a positive number, or -1 for all cores (or the cluster's "
                        "workers)")
        methods = ALL_METHODS if args.methods == "all" else tuple(args.methods.split(","))
        unknown = sorted(set(methods) - set(METHODS))
        if unknown:
            p_sim.error(f"argument --methods: unknown {unknown}; choose from {', '.join(sorted(METHODS))}")
    if args.command == "bounds":
        return _bounds(args)
    if args.command == "flower-demo":
        return _flower_demo(parser, commands["flower-demo"], args)
    if args.command == "demo":
        _check_out(commands["demo"], args.out)
        demo(reps=args.reps, out=args.out, random_state=args.seed)
    else:
        _check_out(p_sim, args.out)
        simulate(args.model, args.h, args.reps, methods, args.out, n_clients=args.clients,
                 n_samples=args.samples, n_outliers=args.outliers, n_init=args.n_init, n_jobs=args.jobs,
                 random_state=args.seed, backend=args.backend, address=args.address, penalty=args.penalty)
    return 0


if __name__ == "__main__":
    sys.exit(main())
