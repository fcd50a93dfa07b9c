"""The check's holdout rule (``--holdout auto|N|fraction``): how many samples are held back from
calibration for the fidelity check, and the error a calibration setting that cannot be used raises.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np

from ..base.errors import BadInputError

__all__ = ["CalibConfigError", "parse_holdout", "held_back_count", "synthetic_sample_count", "AUTO_HOLDOUT_MIN",
           "AUTO_HOLDOUT_FRACTION", "INT_TEXT"]

# --holdout auto: a held-out check only pays when enough samples are left to calibrate on; below
# this the check runs in-sample.  The 20% of 32 is 6 samples held out, 26 calibrated on.
AUTO_HOLDOUT_MIN = 32
AUTO_HOLDOUT_FRACTION = 0.2

_HOLDOUT_HELP = "auto, a count of samples (0 = check in-sample) or a fraction between 0 and 1 such as 0.2"
INT_TEXT = re.compile(r"[+-]?\d+")  # a count, as opposed to a fraction


class CalibConfigError(BadInputError, ValueError):
    """A calibration setting that cannot be used (also a ValueError, for dataclass-style callers)."""


def parse_holdout(value) -> int | float | None:
    """``None`` / ``"auto"`` -> None, a count -> int >= 0, a fraction -> float in (0, 1).

    Raises :class:`CalibConfigError` with a one-line message for anything else."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("", "auto"):
            return None
        if INT_TEXT.fullmatch(text):
            value = int(text)
        else:
            try:
                value = float(text)
            except ValueError:
                raise CalibConfigError(f"--holdout expects {_HOLDOUT_HELP}; got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise CalibConfigError(f"--holdout expects {_HOLDOUT_HELP}; got {value!r}")
    if isinstance(value, (int, np.integer)):
        if value < 0:
            raise CalibConfigError(f"--holdout count must be 0 or more, got {int(value)}")
        return int(value)
    value = float(value)
    if not (math.isfinite(value) and 0.0 < value < 1.0):
        raise CalibConfigError(f"--holdout fraction must be between 0 and 1, got {value!r} "
                               f"(a count is a whole number)")
    return value


def held_back_count(n: int, holdout) -> int:
    """Samples of ``n`` held back for the check under ``holdout`` (a CalibConfig.holdout value).

    Auto holds back 20% (rounded down) from 32 samples on, none below.  At least one sample is
    always left to calibrate on.
    """
    holdout = parse_holdout(holdout)
    if holdout is None:
        hold = n * Fraction(repr(AUTO_HOLDOUT_FRACTION)) if n >= AUTO_HOLDOUT_MIN else 0
    elif isinstance(holdout, float):
        hold = n * Fraction(repr(holdout))  # decimal-exact: 0.29 of 100 is 29, not 28.999...
    else:
        hold = holdout
    return min(math.floor(hold), max(0, n - 1))


def synthetic_sample_count(count: int, holdout) -> int:
    """Synthetic samples to generate so that ``count`` are calibrated on and the rest are what
    the holdout rule holds back of the whole: ``count`` + N for a count N; for a fraction (and
    auto, once that reaches 32 samples) the largest n with n - held_back_count(n) == count, so
    the share held back is as close to the fraction as whole samples allow."""
    holdout = parse_holdout(holdout)
    if isinstance(holdout, int):
        return count + holdout
    frac = Fraction(repr(AUTO_HOLDOUT_FRACTION if holdout is None else holdout))
    n = math.floor(count / (1 - frac))  # n - floor(f*n) == ceil((1-f)*n) <= count  <=>  n <= count/(1-f)
    if holdout is None and n < AUTO_HOLDOUT_MIN:
        return count  # too few for a held-out check: all are calibrated on, the check is in-sample
    return n
