import pytest

from fedmm.cli import main


@pytest.mark.slow  # 4 s: in CI's slow steps (.ci/run), so that the default run stays under 5 minutes
def test_demo_prints_a_table_and_writes_the_figure(tmp_path, capsys):
    assert main(["demo", "--reps", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "local-em" in out and "pooled-grem" in out and "error of the mixing proportions" in out
    assert "mean (sd) over 1 replications of the largest error over the 9 honest clients" in out
    assert (tmp_path / "fedmm-demo.png").stat().st_size > 10_000


@pytest.mark.parametrize("argv, match", [
    (["simulate", "--h", "0:2"], "argument --h"), (["simulate", "--h", "abc"], "argument --h"),
    (["simulate", "--h", "-1,0"], "argument --h"), (["simulate", "--reps", "0"], "argument --reps"),
    (["simulate", "--clients", "1"], "argument --clients"), (["simulate", "--outliers", "10"], "argument --outliers"),
    (["simulate", "--methods", "fedavg"], "argument --methods"), (["bounds", "--n", "0"], "argument --n"),
    (["demo", "--reps", "0"], "argument --reps"), (["flower-demo", "--clients", "1"], "argument --clients"),
    (["flower-demo", "--method", "local-em"], "argument --method"), (["bounds", "--eps", "0.7"], "argument --eps"),
    (["bounds", "--h", "-1"], "argument --h"), (["bounds", "--delta", "nan"], "argument --delta"),
    (["flower-demo", "--tls"], "argument --tls"), (["simulate", "--backend", "spark"], "argument --backend"), (["simulate", "--penalty", "big"], "argument --penalty"),
    (["simulate", "--h", "0:1e9:1e-9"], "argument --h: '0:1e9:1e-9' has more than 1000 values"),
    (["simulate", "--samples", "1"], "argument --samples: 1 samples per client"),
    (["flower-demo", "--samples", "4"], "so give at least 5"),
    (["simulate", "--jobs", "0"], "argument --jobs: 0 workers"),
])
def test_cli_errors_are_one_line_naming_the_argument(argv, match, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and match in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["simulate", "demo", "flower-demo"])
def test_an_output_folder_that_cannot_be_written_fails_before_the_study(command, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as stop:
        main([command, "--out", str(blocker / "out")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"argument --out: cannot write to '{blocker / 'out'}'" in err


def test_simulate_passes_the_penalty_to_fedgrem_only(tmp_path, monkeypatch):
    import fedmm.cli
    seen = {}
    real = fedmm.cli.run_study

    def spy(model, methods, settings, reps, random_state, fit_options, **kw):
        seen.update(methods)
        return real(model, methods, settings, reps, random_state, fit_options, **kw)

    monkeypatch.setattr(fedmm.cli, "run_study", spy)
    argv = ["simulate", "--h", "0", "--reps", "1", "--methods", "fedgrem,local-em", "--n-init", "1",
            "--penalty", "sure", "--out", str(tmp_path)]
    assert main(argv) == 0
    assert seen["fedgrem"].penalty == "sure" and seen["local-em"] == "local-em"
    assert (tmp_path / "results.csv").exists()


def test_cli_version_and_help_texts(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.startswith("fedmm ")
    with pytest.raises(SystemExit):
        main(["bounds", "--help"])
    help_text = capsys.readouterr().out
    assert "fraction of outlier clients" in help_text and "samples per client" in help_text
