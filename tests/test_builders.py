"""The test models themselves are valid ONNX (tests/builders.py)."""

import onnx

from builders import detector_model, fp16_model


def test_builders_make_valid_models():
    for m in (detector_model(), detector_model(opset=12), fp16_model()):
        onnx.checker.check_model(m, full_check=True)
