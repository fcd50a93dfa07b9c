"""Issue 8: loading a model, project, plan or calibration data never executes code from it.

Two kinds of check:
- static: the shipped code (``qtquant/``, ``benchmarks/``) has no pickle-family imports, no
  ``eval``/``exec``, no ``allow_pickle=True``, every ``np.load`` says ``allow_pickle=False``,
  no unsafe ``yaml.load`` / ``torch.load`` and no loading of custom-op libraries named by a model;
- behavioural: a calibration file carrying a pickle payload is refused and the payload never
  runs (a sentinel file it would create stays absent).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from builders import branchy_concat_model, save

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [ROOT / "qtquant", ROOT / "benchmarks"]
PICKLE_FAMILY = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "marshal", "shelve",
                 "jsonpickle"}


def _py_files():
    for root in SHIPPED:
        if root.exists():
            yield from sorted(root.rglob("*.py"))


def _kw(call: ast.Call, name: str):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def _is_const(node, value) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


def _call_name(call: ast.Call) -> str:
    f = call.func
    parts = []
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if isinstance(f, ast.Name):
        parts.append(f.id)
    return ".".join(reversed(parts))


def code_findings(path: Path) -> list[str]:
    """Unsafe constructs in one source file, as 'file:line: what' strings."""
    rel = path.relative_to(ROOT)
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PICKLE_FAMILY:
                    out.append(f"{where}: import {a.name}")
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] in PICKLE_FAMILY:
                out.append(f"{where}: from {node.module} import ...")
        elif isinstance(node, ast.Call):
            name = _call_name(node)
            last = name.rsplit(".", 1)[-1]
            if name in ("eval", "exec", "builtins.eval", "builtins.exec", "__import__"):
                out.append(f"{where}: {name}()")
            if _is_const(_kw(node, "allow_pickle"), True):
                out.append(f"{where}: allow_pickle=True")
            if last == "load" and name.split(".")[0] in ("np", "numpy"):
                if not _is_const(_kw(node, "allow_pickle"), False):
                    out.append(f"{where}: {name}() without allow_pickle=False")
            if name in ("yaml.load", "yaml.unsafe_load", "yaml.full_load"):
                if name != "yaml.load" or not isinstance(_kw(node, "Loader"), ast.Attribute) \
                        or "Safe" not in _kw(node, "Loader").attr:
                    out.append(f"{where}: {name}() without SafeLoader")
            if name == "torch.load" and not _is_const(_kw(node, "weights_only"), True):
                out.append(f"{where}: torch.load() without weights_only=True")
            if last in ("register_custom_ops_library", "load_library", "LoadLibrary") or name == "ctypes.CDLL":
                out.append(f"{where}: {name}() loads native code")
    return out


def test_static_scan_finds_what_it_looks_for(tmp_path):
    """The scanner itself: each construct it hunts is caught in a planted file."""
    bad = tmp_path / "qtquant_bad.py"
    bad.write_text("import pickle\nfrom dill import loads\nimport numpy as np\nimport yaml\nimport torch\n"
                   "eval('1')\nexec('x=1')\nnp.load('a.npy')\nnp.load('a.npy', allow_pickle=True)\n"
                   "yaml.load(s)\ntorch.load(f)\nort.SessionOptions().register_custom_ops_library(p)\n"
                   "np.load('ok.npy', allow_pickle=False)\nmodel.eval()\n")
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        found = code_findings(bad)
    finally:
        ROOT = old
    text = "\n".join(found)
    for what in ("import pickle", "from dill", "eval()", "exec()", "np.load() without", "allow_pickle=True",
                 "yaml.load() without", "torch.load() without", "register_custom_ops_library"):
        assert what in text, (what, text)
    assert len(found) == 10, text  # model.eval() and the safe np.load are not findings


def test_shipped_code_never_deserializes_code():
    files = list(_py_files())
    assert len(files) > 20
    findings = [f for p in files for f in code_findings(p)]
    assert not findings, "unsafe constructs:\n" + "\n".join(findings)


class _Payload:
    """Unpickling this creates a sentinel file: proof that code from the file ran."""

    def __init__(self, sentinel: str):
        self.sentinel = sentinel

    def __reduce__(self):
        return (open, (self.sentinel, "w"))


def _pickled_array(sentinel: Path) -> np.ndarray:
    a = np.empty((1, 3, 8, 8), dtype=object)
    a[...] = 0.0
    a[0, 0, 0, 0] = _Payload(str(sentinel))
    return a


def _qtquant(*args, cwd):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "qtquant", *args], capture_output=True, text=True,
                          timeout=180, env=env, cwd=cwd)


@pytest.mark.parametrize("kind", ["npy", "npz", "npy_folder"])
def test_pickled_calibration_data_is_refused_and_never_runs(tmp_path, kind):
    model = save(branchy_concat_model(shape=(1, 3, 8, 8)), tmp_path / "m.onnx")
    sentinel = tmp_path / "PWNED"
    arr = _pickled_array(sentinel)
    if kind == "npy":
        calib = tmp_path / "evil.npy"
        np.save(calib, arr, allow_pickle=True)
    elif kind == "npz":
        calib = tmp_path / "evil.npz"
        np.savez(calib, x=arr)
    else:
        calib = tmp_path / "folder"
        calib.mkdir()
        np.save(calib / "a.npy", np.zeros((1, 3, 8, 8), np.float32))
        np.save(calib / "b.npy", arr, allow_pickle=True)
    # Sanity: the payload does fire when a careless reader unpickles it.
    np.load(calib if kind != "npy_folder" else calib / "b.npy", allow_pickle=True)
    if kind == "npz":
        with np.load(calib, allow_pickle=True) as z:
            z["x"]
    assert sentinel.exists()
    sentinel.unlink()
    r = _qtquant("analyze", model, "--calib", str(calib), "--calib-count", "2", cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("qtquant: error:"), r.stderr
    assert not sentinel.exists(), "code from the calibration file ran"
    assert "pickle" in lines[0].lower() or "object" in lines[0].lower(), lines[0]


def test_project_and_plan_files_are_plain_json(tmp_path):
    """A project or plan that is a pickle (or holds Python-looking payloads) is refused as data."""
    from qtquant.base.errors import QtQuantError
    from qtquant.files.plan import load_plan
    from qtquant.files.project import load_project

    import pickle  # the attacker's tool, used here only to build the hostile file

    sentinel = tmp_path / "PWNED"
    blob = pickle.dumps(_Payload(str(sentinel)))
    for name in ("evil.qtquant", "evil.json"):
        (tmp_path / name).write_bytes(blob)
    with pytest.raises(QtQuantError):
        load_project(tmp_path / "evil.qtquant")
    with pytest.raises(QtQuantError):
        load_plan(tmp_path / "evil.json")
    # JSON that names Python constructs is just strings.
    doc = {"format": "qtquant-project", "version": 1, "model": "__import__('os').system('touch PWNED')",
           "groups": [{"name": "!!python/object/apply:os.system", "members": ["eval('1')"]}]}
    (tmp_path / "strings.qtquant").write_text(json.dumps(doc))
    try:
        load_project(tmp_path / "strings.qtquant")
    except QtQuantError:
        pass
    assert not sentinel.exists()
