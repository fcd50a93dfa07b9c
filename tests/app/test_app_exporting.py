"""The export use case without Qt: what a request asks for is refused before anything is
written when two outputs share a path, and the written paths and lines come back."""

from __future__ import annotations

import pytest

from builders import branchy_concat_model, save
from qtquant.app import Options, open_model
from qtquant.app.exporting import ExportRequest, export
from qtquant.base.errors import QtQuantError
from qtquant.calib import CalibConfig


@pytest.fixture
def calibrated(tmp_path):
    s = open_model(save(branchy_concat_model(), tmp_path / "b.onnx"), options=Options(calib=CalibConfig(count=2)))
    s.run_calibration()
    return s


def test_two_outputs_on_one_path_are_refused(tmp_path):
    req = ExportRequest(model=tmp_path / "o.onnx", html=tmp_path / "o.onnx")
    with pytest.raises(QtQuantError, match="report o.onnx is also the output model"):
        req.check([])



def test_every_output_is_checked_against_inputs_given_once(tmp_path):
    """The inputs may come as a one-pass iterable: the plan (the second output) over the model
    read is refused too, not only what the first output was checked against."""
    read = tmp_path / "in.plan.json"
    read.write_text("{}")
    req = ExportRequest(model=tmp_path / "o.onnx", plan=read)
    with pytest.raises(QtQuantError, match="refusing to overwrite the input in.plan.json"):
        req.check(p for p in [read])
    assert read.read_text() == "{}"

def test_export_writes_what_was_asked_and_says_so(calibrated, tmp_path):
    req = ExportRequest(model=tmp_path / "o.onnx", plan=tmp_path / "o.plan.json", csv=tmp_path / "o.csv")
    res = export(calibrated, req)
    assert res.written == [tmp_path / "o.onnx", tmp_path / "o.plan.json", tmp_path / "o.csv"]
    assert all(p.is_file() for p in res.written)
    assert res.written_lines[0] == res.model.text() and res.written_lines[1:] == \
        [f"wrote plan {tmp_path / 'o.plan.json'}", f"wrote layer table {tmp_path / 'o.csv'}"]
    assert res.accuracy.startswith("accuracy of the exported model") and res.accuracy in res.lines


def test_cancel_stops_before_the_next_file(calibrated, tmp_path):
    with pytest.raises(QtQuantError, match="cancelled"):
        export(calibrated, ExportRequest(model=tmp_path / "o.onnx", plan=tmp_path / "p.json"), cancelled=lambda: True)
    assert not (tmp_path / "p.json").exists()
