"""What the open dialog offers for a model's inputs (issue 20, open dialog items), without Qt."""

from builders import dynamic_model
from qtquant.app.modelinputs import default_shape, model_inputs, readable_dims, recorded_shapes


def test_a_model_exported_at_320_is_offered_320():
    m = dynamic_model({"imgsz": "[320, 320]"})
    (name, dims), = model_inputs(m)
    assert recorded_shapes(m) == {"images": [1, 3, 320, 320]}
    assert default_shape(dims, recorded_shapes(m)["images"]) == "1x3x320x320"
    assert default_shape(dims) == "1x3x640x640"  # nothing recorded: the old default
    assert recorded_shapes(dynamic_model(value_info=[1, 3, 256, 192])) == {"images": [1, 3, 256, 192]}
    assert recorded_shapes(dynamic_model({"imgsz": "not a list"})) == {}


def test_generated_dimension_names_read_as_roles():
    (_, dims), = model_inputs(dynamic_model())
    assert readable_dims(dims) == "batch x 3 x height x width"
    assert readable_dims(["N", 3, "H", "W"]) == "N x 3 x H x W"  # names a person chose stay
    assert readable_dims(["unk__12", 128]) == "batch x 128"
