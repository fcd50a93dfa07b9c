"""The bundled attention demo: what it is there to show, on every march, and its cached copy."""

import pytest

from qtquant.app import Options, open_model
from qtquant.app.demo import build_attention_demo, demo_model_path, write_demo
from qtquant.calib import CalibConfig
from qtquant.perf.march import march_names


@pytest.fixture(scope="module")
def demo_files(tmp_path_factory):
    return write_demo(tmp_path_factory.mktemp("demo"), count=3)


@pytest.mark.parametrize("march", march_names())
def test_both_concats_rescale_their_upsampled_windows_on_every_march(demo_files, march):
    """The first thing a user sees: each Concat rescales the 7x7 and 9x9 windows, which reach it
    through a Resize (a view keeping its conv's scale); the full-resolution 3x3 window is the
    widest input and sets the output's scale, so it needs none, whatever the march's rule."""
    s = open_model(demo_files["attention"], options=Options(march=march, calib=CalibConfig(count=3)))
    s.run_calibration()
    cats = {c.node: c for c in s.concats()}
    assert set(cats) == {"attn/k_cat", "attn/v_cat"}
    for name, c in cats.items():
        kv = name[len("attn/")]
        assert c.rescales == 2, march
        assert 3 < c.ratio < 8  # up to ~6x between the branches
        need = {m.tensor for m in c.inputs if m.needs_rescale}
        assert need == {f"attn/{kv}_proj/up7x7_out", f"attn/{kv}_proj/up9x9_out"}


def test_the_cached_demo_is_rewritten_when_it_is_not_this_build(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    p = demo_model_path()
    want = build_attention_demo().SerializeToString()
    assert p.read_bytes() == want
    mtime = p.stat().st_mtime_ns
    assert demo_model_path() == p and p.stat().st_mtime_ns == mtime  # the current build: left alone
    p.write_bytes(b"an older demo")
    assert demo_model_path() == p and p.read_bytes() == want
