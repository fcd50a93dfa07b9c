"""TensorRT: the INT8 calibration cache, with each group's one scale.

The text format TensorRT's calibrators write (and ModelOpt reads with ``calibration_cache_path``):
a first line ``TRT-<version>-EntropyCalibration2``, then ``tensor: <hex>`` per tensor, the hex
being the big-endian bits of the float32 scale (the tensor's dynamic range / 127).  Tensor names
are the ONNX file's, which TensorRT's ONNX parser keeps.

int16 has no form there: such a tensor is left out of the cache, so TensorRT gives it no INT8 range
and keeps it in a float precision (listed as a note).  A float choice is stated the same way.
"""

from __future__ import annotations

import struct

from ..base.errors import BadInputError
from ..base.fileio import atomic_write_text
from ..base.vocab import Precision
from .facts import DeployFacts, Deployed, Note
from .header import Header

__all__ = ["TRT_VERSION", "CALIBRATOR", "notes", "write", "cache_text", "read_cache"]

TRT_VERSION = 8601  # TensorRT 8.6.1, as its calibrators spell it; newer releases read this cache
CALIBRATOR = "EntropyCalibration2"


def notes(facts: DeployFacts) -> list[Note]:
    return [Note(c.tensor, "int16 has no form in an INT8 calibration cache: left out of the cache, so TensorRT "
                           "keeps it in a float precision (wider than int16)") for c in facts.of(Precision.INT16)]


def _hex(scale: float) -> str:
    return struct.pack(">f", scale).hex()


def cache_entries(facts: DeployFacts) -> dict[str, float]:
    skip = {c.tensor for c in facts.choices}  # int16 and float: no INT8 range
    return {t: s for t, s in facts.scales.items() if t not in skip}


def cache_text(facts: DeployFacts) -> str:
    lines = [f"TRT-{TRT_VERSION}-{CALIBRATOR}"]
    lines += [f"{t}: {_hex(s)}" for t, s in cache_entries(facts).items()]
    return "\n".join(lines) + "\n"


def read_cache(text: str) -> tuple[str, dict[str, float]]:
    """(header line, tensor -> scale) of a calibration cache; a malformed one is a BadInputError."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("TRT-"):
        raise BadInputError("not a TensorRT calibration cache: the first line should be TRT-<version>-<calibrator>")
    out = {}
    for k, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        name, sep, hx = line.rpartition(":")
        try:
            if not sep:
                raise ValueError
            out[name] = struct.unpack(">f", bytes.fromhex(hx.strip()))[0]
        except (ValueError, struct.error):
            raise BadInputError(f"calibration cache line {k} is not 'tensor: hex': {line[:80]!r}") from None
    return lines[0], out


def write(session, facts: DeployFacts, out, notes: list[Note]) -> Deployed:
    res = Deployed("tensorrt", notes=notes)
    path = out / f"{facts.stem}.calib.cache"
    text = cache_text(facts)
    res.files.append(atomic_write_text(path, text, inputs=[session.graph.path], what="calibration cache"))
    header, back = read_cache(path.read_text(encoding="utf-8"))
    want = cache_entries(facts)
    same = back.keys() == want.keys() and all(_hex(back[t]) == _hex(s) for t, s in want.items())
    if not same:
        raise BadInputError(f"{path} did not read back to the scales written")  # (a bug, said, not shipped)
    shared = sum(1 for g in facts.groups if len({want.get(m.tensor) for m in g.members} - {None}) == 1)
    res.checks.append(f"the cache parses back ({header}) to the same {len(back)} scales, bit for bit; "
                      f"{shared} of {len(facts.groups)} group(s) hold one scale")
    fl = [c.tensor for c in facts.of(Precision.FLOAT)]
    head = Header(
        title="TensorRT INT8 calibration cache",
        does=[f"gives TensorRT {len(want)} tensor scales; every member of a group carries the group's one scale",
              "float choices are left out of the cache: TensorRT has no INT8 range for them"
              + (f" ({', '.join(fl[:5])})" if fl else "")],
        use=["trtexec --onnx=MODEL.onnx --int8 --calib=" + path.name + "   # or a calibrator whose "
             "readCalibrationCache returns this file",
             "python -m modelopt.onnx.quantization --onnx_path MODEL.onnx --calibration_cache_path " + path.name],
        cannot=["int16: TensorRT has no INT16 activations; those tensors are left out (float)",
                "TensorRT still chooses per layer; a layer may run in FP16/FP32 where INT8 is slower, and it "
                "fuses Q/DQ-free graphs its own way",
                f"the header says TensorRT {TRT_VERSION} ({CALIBRATOR}); a release that insists on its own "
                "version in the header recalibrates instead"],
        checked=res.checks, notes=notes)
    res.files.append(head.write_readme(out, "tensorrt", facts, [session.graph.path]))
    return res
