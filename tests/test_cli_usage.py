"""Exit codes (DESIGN §6): 2 for a command line that cannot run as given, 3 for bad input."""

import pytest
from builders import branchy_concat_model, save

from qtquant.cli import main


@pytest.fixture
def model(tmp_path):
    return save(branchy_concat_model(), tmp_path / "m.onnx")


def _rc(capsys, *argv):
    try:
        rc = main(list(argv))
    except SystemExit as e:  # argparse's own usage errors leave this way
        rc = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, [ln for ln in err.splitlines() if ln.startswith("qtquant: error:")]


@pytest.mark.parametrize("argv,says", [
    (["calibrate", "--stats-out", "s.npz"], "give MODEL to calibrate"),
    (["calibrate", "--merge", "a.npz", "--stats-out", "s.npz"], "two or more"),
    (["calibrate", "{m}", "--merge", "a.npz", "b.npz", "--stats-out", "s.npz"], "not both"),
    (["calibrate", "{m}", "--stats-out", "s.npz", "--stats", "a.npz"], "--stats reads"),
    # calibrate writes statistics: the sharing and target options are not its own, and are refused
    (["calibrate", "{m}", "--stats-out", "s.npz", "--plan", "p.json"], "unrecognized arguments: --plan"),
    (["calibrate", "{m}", "--stats-out", "s.npz", "--march", "bayes"], "unrecognized arguments: --march"),
    (["analyze", "{m}", "--march", "bayes-x"], "unknown march 'bayes-x'"),
    (["analyze", "{m}", "--calib-count", "0"], "--calib-count"),
    (["analyze", "{m}", "--holdout", "-1"], "0 or more"),
    (["analyze", "{m}", "--mean", "1,2"], "--mean"),
    (["analyze", "{m}", "--observer", "percentile", "--percentile", "101"], "--percentile"),
    (["analyze", "{m}", "--percentile", "90"], "applies to --observer percentile"),
    (["fix", "{m}", "-o", "o.onnx", "--auto-share", "--max-sqnr-drop", "1"], "two auto-shares"),
    (["perf", "{m}", "--top", "0"], "--top"),
])
def test_usage_errors_exit_2_with_the_reason(model, tmp_path, monkeypatch, capsys, argv, says):
    monkeypatch.chdir(tmp_path)
    rc, errors = _rc(capsys, *(a.format(m=model) for a in argv))
    assert rc == 2
    assert len(errors) == 1 and says in errors[0], errors
    assert not (tmp_path / "s.npz").exists() and not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize("argv,says", [
    (["analyze", "missing.onnx"], "not found"),
    (["analyze", "{m}", "--march", "mine.json"], "not found"),  # a profile path: a missing file
    (["calibrate", "--merge", "a.npz", "b.npz", "--stats-out", "s.npz"], "a.npz"),
    (["analyze", "{m}", "--input-shape", "x=1x3"], "x"),
])
def test_bad_input_still_exits_3(model, tmp_path, monkeypatch, capsys, argv, says):
    monkeypatch.chdir(tmp_path)
    rc, errors = _rc(capsys, *(a.format(m=model) for a in argv))
    assert rc == 3
    assert len(errors) == 1 and says in errors[0], errors


def test_calibrate_help_lists_only_what_it_uses(capsys):
    with pytest.raises(SystemExit):
        main(["calibrate", "--help"])
    out = capsys.readouterr().out
    assert "--calib-count" in out and "--input-shape" in out and "--cut" in out
    for flag in ("--march", "--plan", "--policy", "--max-bits-lost", "--int16", "--keep-float"):
        assert flag not in out
