"""The validation scripts run (quick mode) and pass their own checks."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "validation" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fig_misalignment(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "fig.png"
    assert _load("fig_misalignment").main(["--quick", "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000


def test_fig_sure(tmp_path):
    """SURE's penalty beats the paper's schedule at h = 0 and stays within 20% of it at h = 2 (quick: 3
    replications, the figure written)."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "sure.png"
    assert _load("fig_sure").main(["--quick", "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000


def test_paper_gmm_h0_quick(capsys):
    """FedGrEM on the paper's own design beats the paper's reported error (quick: 4 seeds)."""
    assert _load("paper_gmm_h0").main(["--quick"]) == 0
    assert "PASS" in capsys.readouterr().out


def test_fedem_optimum_quick(capsys):
    """FedEM's defaults within 1.2x pooled EM's error on every seed where the paper's start and average stall
    (issue 59; quick: 2 seeds of each design, the paper's FedEM at 3.2 on A's seed 1)."""
    assert _load("fedem_optimum").main(["--quick"]) == 0
    assert "PASS" in capsys.readouterr().out


@pytest.mark.slow  # 6 s: CI runs it beside the default run (.ci/run), which must stay under 5 minutes
def test_bench_kernels_runs(capsys, tmp_path):
    """Smoke mode: tiny sizes, no timing targets (performance is measured by the script, not asserted here)."""
    assert _load("bench_kernels").main(["--smoke", "--figure", str(tmp_path / "perf.png")]) == 0
    out = capsys.readouterr().out
    assert "sklearn/numba" in out and "FedGrEM on the paper's simulation" in out


@pytest.mark.slow  # 16 s: CI runs it beside the default run (.ci/run), which must stay under 5 minutes
def test_realdata_script_runs_the_papers_protocol_on_natural_clients(capsys):
    """Smoke test of validation/realdata.py on the penguin studies (its targets are checked by hand;
    see docs/research/realdata.md): the table has every method and the mixture of regressions runs."""
    realdata = _load("realdata")
    realdata.main(["--quick", "--only", "penguins"])
    out = capsys.readouterr().out
    assert "clients = islands" in out and "fedgrem (local-EM start)" in out and "sklearn" in out


def test_realdata_targets_carry_paired_standard_errors(tmp_path):
    """realdata.py's verdicts compare means; beside each it reports the paired difference to the bound and its
    standard error, "not decided" within two of them; the scores file reads back as written (``--from``)."""
    realdata = _load("realdata")
    clean, dirty = "digits, 10 clients IID, eps=0.0", "digits, 10 clients IID, eps=0.1"
    pooled = [0.20, 0.30, 0.25, 0.22]
    results = {clean: [{"fedgrem": p - 0.02, "pooled-em": p, "fedem": 0.3, "local-em": 0.4} for p in pooled],
               dirty: [{"fedgrem": p - 0.015, "pooled-em": p, "fedem": 0.5, "local-em": 0.4} for p in pooled]}
    path = tmp_path / "scores.csv"
    realdata.write_scores(results, path)
    assert realdata.read_scores(path) == results
    (text0, met0), (text1, met1) = realdata.check(results)
    # Clean: FedGrEM 0.02 below pooled EM in every replication, 0.032 below the 5% bound on average, se 0.001.
    assert met0 and "paired difference -0.032, se 0.001)" in text0
    # Contaminated: f - 1.1 f0 = 0.007 - 0.1 p, between -0.023 and -0.013: decided.
    d, se = realdata.paired_difference([r["fedgrem"] for r in results[dirty]],
                                       [1.1 * r["fedgrem"] for r in results[clean]])
    assert met1 and d < 0 and f"paired difference {d:+.3f}, se {se:.3f}" in text1 and "not decided" not in text1
    # Within two standard errors of the bound the verdict stands but is marked undecided.
    noisy = {clean: [{"fedgrem": p + s, "pooled-em": p, "fedem": 0.3, "local-em": 0.4}
                     for p, s in zip(pooled, (-0.05, 0.05, -0.04, 0.03))]}
    (text, met), = realdata.check(noisy)
    assert "not decided" in text


def test_mor_floors(capsys):
    """validation/paper_designs.py --floors-only (3 seeds): on the honest clients' data at h = 0 least squares with
    the labels known is below the 0.3 target and maximum likelihood from the truth is above it, on average
    (20 seeds: 0.247 and 0.338, sds 0.024 and 0.057: the margins here are 2 and 1.2 standard errors of a
    3-seed mean)."""
    assert _load("paper_designs").main(["--model", "mor", "--floors-only", "--seeds", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()

    def floor(text):
        return float(next(line for line in lines if text in line and "one outlier" in line).split(": ")[1].split()[0])
    assert floor("least squares") < 0.3 < floor("pooled EM started at the truth")


@pytest.mark.slow
def test_paper_gmm_h0_full(capsys):
    """The whole 20-seed study (about 100 s on two cores): run with pytest -m slow."""
    assert _load("paper_gmm_h0").main([]) == 0


@pytest.mark.slow  # 5 s: in CI's slow steps (.ci/run), so that the default run stays under 5 minutes
def test_model_selection_quick(capsys):
    """BIC chooses the true number of components on the paper's design at h = 0 (quick: 2 seeds)."""
    assert _load("model_selection").main(["--quick"]) == 0
    assert "met: h=0, bic" in capsys.readouterr().out


@pytest.mark.slow  # 4 s: in CI's slow steps (.ci/run)
def test_decentralized_quick(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    assert _load("decentralized").main(["--quick", "--figure", str(tmp_path / "fig.png")]) == 0
    assert (tmp_path / "fig.png").stat().st_size > 10_000
    out = capsys.readouterr().out
    assert "Clustered design" in out and "DOES NOT HOLD" not in out




def test_covariance_starts_quick(capsys):
    """validation/covariance_starts.py (quick: breast cancer, full covariances, one replication): fedmm's
    pooled EM reaches scikit-learn's optimum on the standardized features, which it missed by 2 nats per
    sample when full covariances were whitened."""
    assert _load("covariance_starts").main(["--quick"]) == 0
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("option", ["centre_margins=True", pytest.param("shrinkage=linear", marks=pytest.mark.slow)])
def test_fedgrem_options_quick(capsys, option):
    """The paired comparison of an experiment outside FedGrEM's API with the defaults runs end to end (two
    replications of the quick simulated designs, the real-data cases in the full form; one experiment in the
    default run, both with -m slow); the numbers are the full runs', in docs/research/fedgrem-options.md."""
    assert _load("fedgrem_options").main(["--option", option, "--quick", "--only", "design"]) == 0
    out = capsys.readouterr().out
    assert f"| defaults | {option} |" in out and "| GMM design, h = 0 | 2 |" in out


def test_an_option_is_parsed_as_a_bool_a_number_or_a_string():
    parse = _load("fedgrem_options").parse_option
    assert parse("centre_margins=True") == {"centre_margins": True}
    assert parse("C_eta=0.8") == {"C_eta": 0.8}
    assert parse("shrinkage=linear") == {"shrinkage": "linear"}


def test_shrinkage_floor_quick(capsys):
    """validation/shrinkage_floor.py (quick: 200 draws per h): with the labels and centres known, no constant
    soft threshold goes below the centre's error h = 1 at h = 1; a threshold sized to each component's noise
    does (0.91 in the full run), and linear shrinkage with the true spread does better (0.87). The mean over
    200 draws has a standard error of about 0.01, and the margins asked are 0.04 and 0.05."""
    assert _load("shrinkage_floor").main(["--quick"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| 1 |"))
    local, centre, soft, sized, linear = (float(cell.split()[0]) for cell in row.strip("| ").split("|")[1:])
    assert soft > 0.97 and sized < soft - 0.04 and linear < soft - 0.05 and linear < centre - 0.05


def test_communication_quick(capsys):
    """The communication table (quick: K = 10 and 100): every method's round sends its protocol's numbers."""
    assert _load("communication").main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "| 100 | FedGrEM |" in out and "| 2536 |" in out and "| 1696 |" in out
