import warnings

import numpy as np
import pytest

from fedmm import SingularComponentWarning
from fedmm.cli import main, parse_range
from fedmm.metrics import adjusted_rand_index, misclustering_rate
from fedmm.simulate import make_federated_gmm, make_federated_mor, sample_gmm, sample_mor, snr
from fedmm.studies import format_table, read_csv, run_study, summarize, write_csv

CENTERS = np.array([[0.0, 0.0], [6.0, 0.0]])


def test_misclustering_rate_and_ari_by_hand():
    truth = np.array([0, 0, 1, 1, 2, 2])
    assert misclustering_rate(truth, np.array([2, 2, 0, 0, 1, 1])) == 0.0  # relabelled perfectly
    assert misclustering_rate(truth, np.array([2, 2, 0, 0, 1, 0])) == pytest.approx(1 / 6)
    assert adjusted_rand_index(truth, np.array([1, 1, 2, 2, 0, 0])) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="differ in shape"):
        misclustering_rate(truth, truth[:3])


def test_held_out_samples_follow_the_same_truth():
    X, truth = make_federated_gmm(3, 50, centers=CENTERS, outlier_clients=[2], random_state=0)
    X_test, labels = sample_gmm(truth, 5000, random_state=1)
    np.testing.assert_allclose(X_test[0].mean(0), truth.weights[0] @ truth.theta[0], atol=0.15)
    assert np.all(labels[2] == -1)
    Xr, y, truth_r = make_federated_mor(2, 50, centers=CENTERS, random_state=2)
    X_test, y_test, labels = sample_mor(truth_r, 10, random_state=3)
    assert X_test[1].shape == (10, 2) and y_test[1].shape == (10,)


def test_snr_is_the_papers_definition():
    _, truth = make_federated_gmm(2, 10, centers=np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]]), random_state=0)
    assert snr(truth) == pytest.approx(5.0)  # min over clients of the largest pairwise distance


def test_study_rows_are_reproducible_and_round_trip_through_csv(tmp_path):
    settings = [{"h": 0.0, "n_clients": 3, "n_samples": 60, "centers": CENTERS}]
    a = run_study("gmm", ("local-em", "fedgrem"), settings, reps=2, fit_options={"max_iter": 50})
    b = run_study("gmm", ("local-em", "fedgrem"), settings, reps=2, fit_options={"max_iter": 50}, n_jobs=2)
    assert [r["theta_error"] for r in a] == [r["theta_error"] for r in b]  # parallel = sequential
    assert {r["method"] for r in a} == {"local-em", "fedgrem"} and len(a) == 4
    assert all(0 <= r["misclustering"] <= 1 and r["ari"] <= 1 for r in a)
    assert all((r["floats"] > 0) == (r["method"] == "fedgrem") for r in a)  # local EM sends nothing
    rows = [{k: v for k, v in r.items() if k != "centers"} for r in a]
    back = read_csv(write_csv(rows, tmp_path / "rows.csv"))
    assert back[0]["theta_error"] == pytest.approx(rows[0]["theta_error"]) and back[0]["converged"] in (True, False)
    mean, sd = summarize(rows)[(0.0, "fedgrem")]
    assert mean == pytest.approx(np.mean([r["theta_error"] for r in rows if r["method"] == "fedgrem"]))
    assert "fedgrem" in format_table(rows)


def test_study_input_errors():
    with pytest.raises(ValueError, match="Unknown method"):
        run_study("gmm", ("fedavg",))
    with pytest.raises(ValueError, match="model must be"):
        run_study("hmm", ("fedgrem",))


def test_parse_range():
    assert parse_range("0:1:0.25") == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert parse_range("0,1.5") == [0.0, 1.5]


@pytest.mark.slow  # 4 s: in CI's slow steps (.ci/run), so that the default run stays under 5 minutes
def test_simulate_command_writes_its_outputs(tmp_path, capsys):
    assert main(["simulate", "--model", "mor", "--h", "0", "--reps", "1", "--methods", "d-fedgrem,local-em",
                 "--clients", "4", "--samples", "80", "--n-init", "2", "--out", str(tmp_path)]) == 0
    for name in ("results.csv", "summary.txt", "study.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert len(read_csv(tmp_path / "results.csv")) == 2


def test_a_study_on_a_local_dask_cluster_gives_the_same_rows():
    """The cluster engine only schedules: every fit's seed is fixed by the grid (issue 16, item 4)."""
    distributed = pytest.importorskip("distributed")
    settings = [{"h": 0.5, "n_clients": 3, "n_samples": 60, "centers": CENTERS}]
    here = run_study("gmm", ("local-em", "fedgrem"), settings, reps=2, fit_options={"max_iter": 50})
    with distributed.Client(distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                                     dashboard_address=None)):
        there = run_study("gmm", ("local-em", "fedgrem"), settings, reps=2, fit_options={"max_iter": 50},
                          n_jobs=-1, backend="dask")
    assert [r["theta_error"] for r in there] == [r["theta_error"] for r in here]


def test_unknown_backends_and_missing_engines_are_clear_errors(monkeypatch):
    with pytest.raises(ValueError, match="backend must be one of"):
        run_study("gmm", ("local-em",), reps=1, backend="spark")
    monkeypatch.setitem(__import__("sys").modules, "ray", None)          # ray not installed
    with pytest.raises(ImportError, match=r"pip install 'fedmm\[ray\]'"):
        run_study("gmm", ("local-em",), reps=1, backend="ray")


def test_study_rows_count_singular_components_instead_of_warning():
    """Local EM with fewer samples per component than coefficients: recorded in the row, not printed per fit.
    FedGrEM pools, so fewer of its components are singular (here 6 of 15 against local EM's 12)."""
    settings = [{"h": 0.0, "n_clients": 3, "n_samples": 20}]
    with warnings.catch_warnings():
        warnings.simplefilter("error", SingularComponentWarning)
        rows = run_study("mor", ("local-em", "fedgrem"), settings, reps=1, fit_options={"max_iter": 30})
    singular = {r["method"]: r["singular_components"] for r in rows}
    assert 0 < singular["local-em"] and singular["fedgrem"] < singular["local-em"]
    assert all(r["empty_components"] == 0 for r in rows)
