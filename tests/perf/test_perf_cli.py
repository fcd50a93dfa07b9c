"""``qtquant perf``: text, JSON, CSV and the self-contained HTML report; error exits."""

import csv
import io
import json
from html.parser import HTMLParser

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qtquant.cli import main


@pytest.fixture
def model(tmp_path):
    rng = np.random.default_rng(0)

    def w(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [
        # a is a MaxPool's output, at convA's scale: bayes-e requantizes it into the Concat (a view
        # is no layer's to write at the Concat's scale), while b10, made for the Concat alone, is written at it
        helper.make_node("Conv", ["x", "wa"], ["a0"], name="convA", kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("MaxPool", ["a0"], ["a"], name="poolA", kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Conv", ["x", "wb"], ["b"], name="convB", kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Mul", ["b", "ten"], ["b10"], name="scale10"),
        helper.make_node("Concat", ["a", "b10"], ["cat"], name="cat", axis=1),
        helper.make_node("Conv", ["cat", "wc"], ["y"], name="convC", kernel_shape=[1, 1]),
    ]
    g = helper.make_graph(nodes, "perf_cli", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32, 32])],
                          [w("wa", (8, 3, 3, 3)), w("wb", (8, 3, 3, 3)), w("wc", (8, 16, 1, 1)),
                           numpy_helper.from_array(np.array(10.0, np.float32), "ten")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    p = tmp_path / "m.onnx"
    onnx.save(m, p)
    return p


class _Report(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tables = {}
        self._table = None
        self._in_body = False
        self.sections = []
        self.svg_rects = 0
        self.external = []
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "href"):
            if key in a:
                self.external.append(a[key])
        if tag == "section":
            self.sections.append(a.get("id"))
        if tag == "table" and a.get("id"):
            self._table = a["id"]
            self.tables[self._table] = []
        if tag == "tbody":
            self._in_body = True
        if tag == "tr" and self._in_body and self._table:
            self.tables[self._table].append(a.get("data-name"))
        if tag == "rect":
            self.svg_rects += 1
        if tag in ("link", "iframe", "img"):
            self.external.append(tag)
        if tag == "script":
            self.scripts += 1

    def handle_endtag(self, tag):
        if tag == "tbody":
            self._in_body = False
        if tag == "table":
            self._table = None


def test_json_html_and_csv(model, tmp_path, capsys):
    html_path, csv_path = tmp_path / "r.html", tmp_path / "r.csv"
    rc = main(["perf", str(model), "--json", "--report", str(html_path), "--csv", str(csv_path),
               "--calib-count", "4"])
    out = capsys.readouterr().out
    assert rc == 0
    doc = json.loads(out)
    after = doc["after"]
    assert doc["march"]["name"] == "bayes-e"
    names = [lc["name"] for lc in after["layers"]]
    assert "cat_rescale_0" in names  # input 0, the MaxPool's view of convA, is rescaled
    assert after["summary"]["rescales"] == 1
    # what the scales (so the rescale count) rest on
    assert doc["calibration"]["source"] == "synthetic" and doc["calibration"]["samples"] == 4
    assert main(["perf", str(model), "--calib-count", "4"]) == 0
    assert "; calibrated with minmax on 4 samples of synthetic data (no --calib given) (the rescales follow" \
        in capsys.readouterr().out
    assert after["summary"]["latency_ms"] > 0 and after["summary"]["fps"] > 0
    assert after["rescale_cost_by_concat"]["cat"] > 0

    text = html_path.read_text(encoding="utf-8")
    rep = _Report()
    rep.feed(text)
    assert rep.sections == ["summary", "chart", "layers", "rescales"]
    assert rep.tables["layer-table"] == names  # every layer, in order
    assert rep.tables["rescale-table"] == ["cat_rescale_0"]
    assert rep.svg_rects >= 1
    assert rep.external == []  # self-contained: no fetched resources
    assert "@import" not in text and "url(" not in text
    assert f"{after['summary']['latency_ms']:.3f} ms" in text  # the closing note quotes the totals

    rows = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    assert [r["name"] for r in rows] == names
    assert rows[names.index("cat_rescale_0")]["is_rescale"] == "True"
    assert not list(tmp_path.glob(".*tmp*")) and not list(tmp_path.glob(".qtquant-*"))  # no temp leftovers


def test_text_output_and_plan_before_after(model, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"format": "qtquant-plan", "version": 1,
                                "groups": [{"id": 0, "members": ["a", "b10", "cat"]}]}))
    rc = main(["perf", str(model), "--plan", str(plan), "--calib-count", "4", "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["before"]["summary"]["rescales"] == 1
    assert doc["after"]["summary"]["rescales"] == 0
    assert doc["after"]["summary"]["latency_ms"] < doc["before"]["summary"]["latency_ms"]
    assert doc["groups"] == [["a", "b10", "cat"]]

    html_path = tmp_path / "p.html"
    rc = main(["perf", str(model), "--plan", str(plan), "--calib-count", "4", "--report", str(html_path)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "as opened" in out and "edited" in out
    assert "cat_rescale_0" in html_path.read_text()  # listed as removed by the groups


def test_text_table_lists_costed_layers(model, capsys):
    rc = main(["perf", str(model), "--calib-count", "2", "--march", "bernoulli2"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "convA" in out and "cat_rescale_0" in out and "on bernoulli2" in out
    assert "static estimate (BPU)" in out and "board estimate (1 thread)" in out and "FPS" in out \
        and "DDR per frame" in out


def test_bad_march_name_is_a_usage_error(model, capsys):
    # a name that is no march is a usage error (exit 2, as argparse's choices), like --observer's
    with pytest.raises(SystemExit) as e:
        main(["perf", str(model), "--march", "bayes-x"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.splitlines()[-1].startswith("qtquant: error: argument --march: unknown march 'bayes-x'")
    assert main(["perf", str(model), "--march", str(model.parent / "missing.json")]) == 3  # a path: bad input
    assert "not found" in capsys.readouterr().err


def test_bad_march_file_exits_3(model, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "params": {"peak_tops": 5}}))
    rc = main(["perf", str(model), "--march-file", str(bad)])
    err = capsys.readouterr().err
    assert rc == 3 and err.count("\n") == 1 and "bad.json" in err
    rc = main(["perf", str(model), "--march-file", str(tmp_path / "missing.json")])
    err = capsys.readouterr().err
    assert rc == 3 and err.count("\n") == 1 and "not found" in err


def test_report_refuses_to_overwrite_the_model(model, capsys):
    rc = main(["perf", str(model), "--report", str(model)])
    assert rc == 3
    assert "refusing to overwrite" in capsys.readouterr().err
    assert onnx.load(str(model)).graph.node  # untouched
