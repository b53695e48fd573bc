from fedmm.cli import main


def test_demo_prints_a_table_and_writes_the_figure(tmp_path, capsys):
    assert main(["demo", "--reps", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "local-em" in out and "pooled-grem" in out and "mixing-proportion error" in out
    assert (tmp_path / "fedmm-demo.png").stat().st_size > 10_000
