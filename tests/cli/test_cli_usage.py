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


@pytest.mark.parametrize("argv,code,says", [
    (["calibrate", "--stats-out", "s.npz"], 2, "give MODEL to calibrate"),
    (["calibrate", "--merge", "a.npz", "--stats-out", "s.npz"], 2, "two or more"),
    (["calibrate", "{m}", "--merge", "a.npz", "b.npz", "--stats-out", "s.npz"], 2, "not both"),
    (["calibrate", "{m}", "--stats-out", "s.npz", "--stats", "a.npz"], 2, "--stats reads"),
    # calibrate writes statistics: the sharing and target options are not its own, and are refused
    (["calibrate", "{m}", "--stats-out", "s.npz", "--plan", "p.json"], 2, "unrecognized arguments: --plan"),
    (["calibrate", "{m}", "--stats-out", "s.npz", "--march", "bayes"], 2, "unrecognized arguments: --march"),
    (["analyze", "{m}", "--march", "bayes-x"], 2, "unknown march 'bayes-x'"),
    (["analyze", "{m}", "--calib-count", "0"], 2, "--calib-count"),
    (["analyze", "{m}", "--holdout", "-1"], 2, "0 or more"),
    (["analyze", "{m}", "--mean", "1,2"], 2, "--mean"),
    (["analyze", "{m}", "--observer", "percentile", "--percentile", "101"], 2, "--percentile"),
    (["analyze", "{m}", "--percentile", "90"], 2, "applies to --observer percentile"),
    (["fix", "{m}", "-o", "o.onnx", "--auto-share", "--max-sqnr-drop", "1"], 2, "two auto-shares"),
    (["perf", "{m}", "--top", "0"], 2, "--top"),
    (["analyze", "missing.onnx"], 3, "not found"),
    (["analyze", "{m}", "--march", "mine.json"], 3, "not found"),  # a profile path: a missing file
    (["calibrate", "--merge", "a.npz", "b.npz", "--stats-out", "s.npz"], 3, "a.npz"),
    (["analyze", "{m}", "--input-shape", "x=1x3"], 3, "x"),
    # a threshold Options refuses: bad input, one line naming the option
    (["analyze", "{m}", "--auto-share-max-bits-lost", "-1"], 3, "auto_share_max_bits_lost (the auto-share threshold)"),
    (["fix", "{m}", "-o", "o.onnx", "--float-output-max-bits-lost", "nan"], 3, "float_output_max_bits_lost"),
    # one flag for two thresholds: the command line says which it means
    (["fix", "{m}", "-o", "o.onnx", "--auto-share", "--max-bits-lost", "3"], 2,
     "--max-bits-lost: say which threshold: --auto-share-max-bits-lost BITS"),
])
def test_exit_codes_and_the_reason(model, tmp_path, monkeypatch, capsys, argv, code, says):
    """2: a command line that cannot run as given; 3: bad input (a missing file, a shape that does not fit)."""
    monkeypatch.chdir(tmp_path)
    rc, errors = _rc(capsys, *(a.format(m=model) for a in argv))
    assert rc == code
    assert len(errors) == 1 and says in errors[0], errors
    assert not (tmp_path / "s.npz").exists() and not (tmp_path / "o.onnx").exists()


def test_calibrate_help_lists_only_what_it_uses(capsys):
    with pytest.raises(SystemExit):
        main(["calibrate", "--help"])
    out = capsys.readouterr().out
    assert "--calib-count" in out and "--input-shape" in out and "--cut" in out
    for flag in ("--march", "--plan", "--policy", "--auto-share-max-bits-lost", "--float-output-max-bits-lost",
                 "--int16", "--keep-float"):
        assert flag not in out
