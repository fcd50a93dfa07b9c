"""``qtquant check --report`` with the app installed: the canvas with the mismatch overlay is in the page."""

import base64
import io
import re

import pytest
from PIL import Image

from builders import detector_model, save
from qtquant.cli import main


@pytest.mark.slow
def test_the_check_report_embeds_the_canvas(qapp, tmp_path, capsys):
    model = save(detector_model(), tmp_path / "det.onnx")
    budget = tmp_path / "budget.toml"
    budget.write_text("max_rescales = 0\n")
    report = tmp_path / "check.html"
    assert main(["check", model, "--budget", str(budget), "--calib-count", "2", "--report", str(report)]) == 1
    assert "max_rescales: " in capsys.readouterr().out
    html = report.read_text()
    m = re.search(r'<img class="canvas"[^>]* src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert m, "no embedded canvas picture"
    img = Image.open(io.BytesIO(base64.b64decode(m.group(1))))
    assert img.size[0] >= 600 and img.size[1] >= 400
    img.save(tmp_path / "canvas.png")
    # the overlay colours the mismatched Concats yellow to red: such pixels are in the picture
    warm = [c for n, c in img.convert("RGB").getcolors(1 << 20) if c[0] > 200 and c[2] < 90 and n > 20]
    assert warm
    assert "mismatch overlay" in html and "unavailable" not in html
