"""Shared fixtures for every test.  No Qt here: the tests outside ``tests/gui`` run without PySide6.

``tests/`` is on ``sys.path`` (``pythonpath`` in pyproject.toml), so ``from builders import ...``
works from any folder below it.  A module that needs another ``session`` defines its own.
"""

import pytest

from builders import RESCALING_MARCH, detector_model, save


@pytest.fixture(scope="module")
def det_path(tmp_path_factory):
    """``builders.detector_model`` saved once per test module."""
    return save(detector_model(), tmp_path_factory.mktemp("det") / "det.onnx")


@pytest.fixture
def session(det_path):
    """The detector opened and calibrated (synthetic data), fresh for each test, on a march that
    rescales its conv branches (:data:`builders.RESCALING_MARCH`: the cases it holds are rescales)."""
    from qtquant.app import Options, open_model

    s = open_model(det_path, options=Options(march=RESCALING_MARCH))
    s.run_calibration()
    return s
