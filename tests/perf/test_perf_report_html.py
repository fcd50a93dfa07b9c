"""The perf report's HTML comes from a Jinja2 template with autoescape: a model's names are text, never markup."""

from __future__ import annotations

from html.parser import HTMLParser

from builders import branchy_concat_model, save

HOSTILE = '<script>alert("x")</script>'
ATTR = '"><img src=x onerror=alert(1)>'


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def _report(tmp_path, **kw):
    from qtquant.app import open_model
    from qtquant.perf import load_march, simulate_session
    from qtquant.perf.report import html_report

    m = branchy_concat_model(gains=(1.0, 10.0))
    renames = {n.name: HOSTILE if n.op_type == "Conv" and i == 0 else ATTR if n.op_type == "Concat" else n.name
               for i, n in enumerate(m.graph.node)}
    for n in m.graph.node:
        n.name = renames[n.name]
    s = open_model(save(m, tmp_path / "m.onnx"))
    s.run_calibration()
    after = simulate_session(s)
    return html_report(after, simulate_session(s, baseline=True), march=load_march("bayes-e"), **kw), after


def test_hostile_node_names_are_escaped(tmp_path):
    page, after = _report(tmp_path, title=f"perf of {HOSTILE}", meta={"model": ATTR, HOSTILE: "x"})
    assert HOSTILE in {lc.name for lc in after.layers}  # the simulator kept the name...
    assert "<script>alert" not in page and "<img" not in page  # ...and the page shows it as text
    p = _Tags()
    p.feed(page)
    assert p.tags.count("script") == 2  # the JSON island and the table sorter, nothing else
    assert "img" not in p.tags
    assert any(HOSTILE in t for t in p.text)  # readable as the name it is


def test_template_ships_with_the_package():
    from importlib.resources import files

    assert files("qtquant").joinpath("templates", "perf_report.html.j2").is_file()


def test_the_march_section_prints_the_same_in_every_process(tmp_path):
    """A profile's sets (the fusion rule's op lists) print sorted: their repr follows the string hash, which
    PYTHONHASHSEED changes, so the same model's report would differ from run to run."""
    import os
    import subprocess
    import sys

    m = save(branchy_concat_model(gains=(1.0, 10.0)), tmp_path / "m.onnx")
    pages = []
    for seed in ("1", "2"):
        out = tmp_path / f"r{seed}.html"
        env = dict(os.environ, PYTHONHASHSEED=seed)
        subprocess.run([sys.executable, "-m", "qtquant", "perf", str(m), "--report", str(out)], env=env,
                       check=True, capture_output=True)
        pages.append(out.read_text())
    assert "FusionRule(" in pages[0] and "write_back=[" in pages[0]
    assert pages[0] == pages[1]
