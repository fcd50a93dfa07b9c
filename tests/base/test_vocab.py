"""One vocabulary: each enum and default is defined once, and every spelling in use maps onto it."""

import json

import pytest

from qtquant.base import vocab
from qtquant.app import Options
from qtquant.calib import CalibConfig, CalibConfigError
from qtquant.cli import build_parser
from qtquant.quant.domains import Policy
from qtquant.perf import MARCHES, load_march, march_names
from qtquant.model.scales import Scheme
from qtquant.base.vocab import OBSERVERS, Observer, Scheme as VScheme, TensorKind, scheme_name


def test_old_locations_are_the_one_definition():
    assert Scheme is VScheme and Policy is vocab.Policy
    from qtquant.calib.observers import OBSERVERS as calib_observers
    from qtquant.cli.common import OBSERVERS as cli_observers

    assert tuple(calib_observers) == tuple(cli_observers) == OBSERVERS == tuple(o.value for o in Observer)


@pytest.mark.parametrize("text,want", [("sym", Scheme.SYMMETRIC_INT8), ("int8-sym", Scheme.SYMMETRIC_INT8),
                                       ("SYMMETRIC_INT8", Scheme.SYMMETRIC_INT8), ("asym", Scheme.ASYMMETRIC_UINT8),
                                       ("uint8-asym", Scheme.ASYMMETRIC_UINT8),
                                       (Scheme.ASYMMETRIC_UINT8, Scheme.ASYMMETRIC_UINT8)])
def test_every_scheme_spelling_parses(text, want):
    assert Scheme.parse(text) is want
    assert scheme_name(text) == want.short
    assert CalibConfig(scheme=text).scheme == want.short


def test_unknown_scheme_is_refused():
    with pytest.raises(ValueError):
        Scheme.parse("int4")
    with pytest.raises(CalibConfigError, match="unknown scheme"):
        CalibConfig(scheme="int4")


def test_cli_choices_derive_from_the_vocabulary():
    p = build_parser()
    sub = next(a for a in p._actions if a.dest == "command").choices["analyze"]
    by_dest = {a.dest: a for a in sub._actions}
    assert tuple(by_dest["observer"].choices) == OBSERVERS
    assert tuple(by_dest["scheme"].choices) == vocab.SCHEME_NAMES
    assert by_dest["calib_count"].default == vocab.DEFAULT_CALIB_COUNT == CalibConfig().count
    assert by_dest["march"].default == vocab.DEFAULT_MARCH
    assert by_dest["auto_share_max_bits_lost"].default == vocab.DEFAULT_AUTO_SHARE_MAX_BITS_LOST \
        == Options().auto_share_max_bits_lost
    assert by_dest["float_output_max_bits_lost"].default == vocab.DEFAULT_FLOAT_OUTPUT_MAX_BITS_LOST \
        == Options().float_output_max_bits_lost


def test_marches_come_from_the_profiles_folder_smallest_first():
    assert sorted(MARCHES) == sorted(march_names())
    rates = [load_march(m).macs_per_s for m in MARCHES]
    assert rates == sorted(rates)
    assert vocab.DEFAULT_MARCH in MARCHES


def test_tensor_kind_still_equals_its_string():
    assert TensorKind.WEIGHT == "weight" and "weight" == TensorKind.WEIGHT
    assert TensorKind.ACTIVATION in {"activation"} and f"{TensorKind.SHAPE}" == "shape"
    assert json.dumps([TensorKind.INPUT]) == '["input"]'


def test_calib_config_from_dict_ignores_unknown_keys_and_takes_json_lists():
    c = CalibConfig.from_dict({"count": 4, "observer": "kl", "mean": [0.5, 0.5, 0.5], "from_the_future": 1})
    assert (c.count, c.observer, c.mean) == (4, "kl", (0.5, 0.5, 0.5))


@pytest.mark.parametrize("bad", [{"count": 0}, {"observer": "best"}, {"seed": [1]}, {"seed": "x"}])
def test_calib_config_from_dict_bad_values_raise_one_line(bad):
    with pytest.raises(CalibConfigError) as e:
        CalibConfig.from_dict(bad)
    assert "\n" not in str(e.value)
