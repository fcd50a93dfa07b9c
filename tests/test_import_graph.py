"""The package's import structure: a light root, no import cycles, no private names across modules.

The graph is read from the source with ``ast`` (every import, function-level and TYPE_CHECKING ones
included), so this runs without import-linter; ``lint-imports`` checks the layers on top of it.
"""

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "qtquant"


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _imports(name: str, path: Path):
    """(imported module, names taken from it, line) per qtquant import of module ``name``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "qtquant":
                    yield a.name, (), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "qtquant":
                continue
            plain = []
            for a in node.names:
                if f"{target}.{a.name}" in MODULES:  # `from . import childproc`: the module itself
                    yield f"{target}.{a.name}", (), node.lineno
                else:
                    plain.append(a.name)
            if plain:
                yield target, tuple(plain), node.lineno


def test_import_qtquant_loads_no_onnx():
    # The root's names load on first use: `import qtquant` (for __version__, or as the parent of a
    # submodule) must not pay for onnx, onnxruntime or numpy.
    code = ("import sys, qtquant; heavy = [m for m in ('onnx', 'onnxruntime', 'numpy') if m in sys.modules]; "
            "print(','.join(heavy)); qtquant.Graph, qtquant.QtQuantError, qtquant.open_model")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_no_import_cycles():
    g = nx.DiGraph()
    for name, path in MODULES.items():
        g.add_node(name)
        for target, _, _ in _imports(name, path):
            if target in MODULES and target != name:
                g.add_edge(name, target)
    assert g.number_of_edges() > 500  # the graph was read (some 1,200 imports)
    cycles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert cycles == []


def test_no_module_imports_another_modules_private_names():
    found = []
    for name, path in MODULES.items():
        for target, names, line in _imports(name, path):
            if target == name:
                continue
            found += [f"{path.relative_to(ROOT)}:{line}: {n} from {target}" for n in names
                      if n.startswith("_") and not n.startswith("__")]
    assert found == []


def test_the_checks_see_a_cycle_and_a_private_import(tmp_path, monkeypatch):
    # The two checks above would pass on an empty graph: show they find what they look for.
    pkg = tmp_path / "qtquant"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import _hidden\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n\n_hidden = 1\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    monkeypatch.setattr(sys.modules[__name__], "MODULES", _modules())
    edges = {(n, t) for n, p in MODULES.items() for t, _, _ in _imports(n, p)}
    assert {("qtquant.a", "qtquant.b"), ("qtquant.b", "qtquant.a")} <= edges
    assert [n for t, names, _ in _imports("qtquant.a", MODULES["qtquant.a"]) for n in names] == ["_hidden"]
