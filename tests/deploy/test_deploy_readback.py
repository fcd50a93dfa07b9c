"""deploy --readback: a compile log after deployment says which groups and choices took effect."""

from __future__ import annotations

import json

import onnx
import pytest

from builders import branchy_concat_model
from hblogs import LogSpec, render_compile_log
from qtquant.app import open_model
from qtquant.cli import main

# x -> conv0 -> relu0 -> pool0 ┐
#   -> conv1 ----------------- cat -> final_relu -> y
#   -> conv2 ----------------- ┘
SHARED = {"x": 1.0, "relu0_out": 4.0, "pool0_out": 4.0, "cat_out": 4.0}


@pytest.fixture
def model(tmp_path):
    m = branchy_concat_model(chain=True)
    onnx.save(m, tmp_path / "m.onnx")
    return m, str(tmp_path / "m.onnx")


def _readback(capsys, path, log, *extra):
    capsys.readouterr()
    code = main(["deploy", path, "--auto-share", "--auto-share-max-bits-lost", "8", "--calib-count", "4", "--readback",
                 str(log), "--json", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _predicted_before(path):
    s = open_model(path)
    s.run_calibration()
    [c] = s.concats(baseline=True)
    return [m.tensor for m in c.inputs if m.needs_rescale]


def test_groups_took_effect_when_the_log_requantizes_nothing_at_them(model, tmp_path, capsys):
    m, path = model
    before = _predicted_before(path)
    assert before  # without the group qtquant predicts requantizes at cat
    log = tmp_path / "after.log"
    log.write_text(render_compile_log(m, LogSpec(thresholds=SHARED, int16=("conv2",))))
    doc = _readback(capsys, path, log, "--int16", "conv2")
    [g] = doc["groups"]
    assert g["effect"] == "took effect" and g["gone"] == before and g["still"] == [] and g["new"] == []
    assert doc["choices"] == [{"tensor": "conv2_out", "precision": "int16", "effect": "took effect",
                               "why": "conv2 outputs int16 in the log"}]
    capsys.readouterr()
    assert main(["deploy", path, "--auto-share", "--auto-share-max-bits-lost", "8", "--calib-count", "4",
                 "--readback", str(log)]) == 0
    lines = capsys.readouterr().out.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("read back "))
    assert lines[i].endswith("1 of 1 group(s) took effect") and lines[i + 1].startswith("group ")


def test_requantizes_still_there_or_new_are_named(model, tmp_path, capsys):
    m, path = model
    before = _predicted_before(path)
    log = tmp_path / "still.log"
    log.write_text(render_compile_log(m, LogSpec(thresholds=SHARED, requantize=("conv1_out", "conv2_out"))))
    doc = _readback(capsys, path, log, "--int16", "conv2")
    [g] = doc["groups"]
    assert g["effect"] in ("partly", "did not take effect")
    assert set(g["still"]) | set(g["new"]) == {"conv1_out", "conv2_out"}
    assert set(g["still"]) == {"conv1_out", "conv2_out"} & set(before)
    assert doc["choices"][0]["effect"] == "did not take effect"  # the log prints conv2 as int8


def test_bad_logs_and_usage(model, tmp_path, capsys):
    _, path = model
    bad = tmp_path / "bad.log"
    bad.write_text("not a log\n")
    capsys.readouterr()
    assert main(["deploy", path, "--readback", str(bad)]) == 3
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert main(["deploy", path, "--readback", str(bad), "--target", "ort"]) == 2
    assert main(["deploy", path]) == 2
    assert "--target and -o" in capsys.readouterr().err
