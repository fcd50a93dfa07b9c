"""RDK X5 QAT: a Python module for horizon_plugin_pytorch that gives each group's producers one
fixed scale, and the int16/float choices their qconfigs, by module name.

The generated module (:data:`TEMPLATE`) holds its decisions as plain data (``GROUPS``,
``PRECISION``, ``UNMAPPED``, ``CAT_SITES``) and imports the plugin only inside the functions that
need it, so its data and name mapping work (and are tested) where the plugin is not installed.
Module names come from the ONNX node scopes (:mod:`.scopes`); given the torch model, the module
checks them with the resolver qtquant's FX and PT2E bridges share (:mod:`qtquant.torch.horizon`).
A member whose name gives no module (a model input, a cat or split inside a module's forward) is
listed in ``UNMAPPED`` with the reason, never dropped.
"""

from __future__ import annotations

import pprint
import re
from typing import Any

from ..base.fileio import atomic_write_text
from .facts import DeployFacts, Deployed, Member, Note
from .header import Header

__all__ = ["notes", "write", "module_source", "FUNCTIONAL_OPS", "static_module"]

# ONNX ops a module's forward makes with a function, not a module of its own: their scope names
# the module whose forward holds them, which the plugin cannot give a qconfig for that output.
FUNCTIONAL_OPS = {"Concat", "Split", "Slice", "Reshape", "Transpose", "Gather", "Flatten", "Squeeze", "Unsqueeze",
                  "Expand", "Shape", "Add", "Sub", "Div", "Pad", "Tile"}


def static_module(m: Member) -> tuple[str, str]:
    """(module name, "") or ("", why not) for one member, from its ONNX name alone."""
    if m.producer is None:
        return "", ("a model input: pin it with QuantStub(scale=...) at its scale" if m.producer_op == "Input"
                    else "a constant: it has no module")
    if not m.module:
        return "", f"node {m.source} has no module scope in its name (export the float model with torch.onnx)"
    if m.source_op in FUNCTIONAL_OPS:
        extra = " (the plugin's FloatFunctional: one per call site)" if m.source_op in ("Concat", "Add", "Sub") \
            else ""
        return "", (f"{m.source_op} inside the forward of {m.module}, not a module: give it a module of its own"
                    f"{extra} and name it in ALIASES")
    return m.module, ""


def notes(facts: DeployFacts) -> list[Note]:
    """One note for the names that give no module (each is listed in UNMAPPED and the report)."""
    bad = [m.tensor for g in facts.groups for m in g.members if not static_module(m)[0]]
    bad += [c.tensor for c in facts.choices if not static_module(c.member)[0]]
    if not bad:
        return []
    return [Note(f"{len(bad)} tensor(s)", f"no module name from the ONNX export (first: {bad[0]}): their fixed "
                                          "scale cannot be given by module name; listed in UNMAPPED")]


def _member(m: Member, **extra) -> dict:
    name, why = static_module(m)
    # ("producer": the node whose module makes the values, what the resolver maps)
    d = {"tensor": m.tensor, "producer": m.source, "producer_op": m.source_op, "module": name}
    if m.source != m.producer:
        d["via"] = f"{m.producer_op} {m.producer} passes on the scale of {m.source}"
    if why:
        d["why"] = why
    d.update(extra)
    return d


def _data(facts: DeployFacts) -> dict:
    groups: list[dict[str, Any]] = [{"id": g.id, "name": g.name, "scale": g.scale, "concats": list(g.concats),
               "members": [_member(m) for m in g.members]} for g in facts.groups]
    prec = [_member(c.member, precision=c.precision.value, scale16=c.scale16) for c in facts.choices]
    unmapped = [{"tensor": m["tensor"], "group": g["id"], "reason": m["why"]}
                for g in groups for m in g["members"] if not m["module"]]
    unmapped += [{"tensor": c["tensor"], "group": None, "reason": c["why"]} for c in prec if not c["module"]]
    cats = [{"concat": c, "inside": m.module, "group": g.id} for g in facts.groups for c in g.concats
            for m in g.members if m.producer == c]  # (a Concat whose output is a member; the rest: concats)
    return {"GROUPS": groups, "PRECISION": prec, "UNMAPPED": unmapped, "CAT_SITES": cats}


def module_source(facts: DeployFacts, header: Header) -> str:
    data = _data(facts)
    parts = {k: pprint.pformat(v, width=116, sort_dicts=False) for k, v in data.items()}
    return TEMPLATE.format(header=header.comment(facts), model=repr(facts.model), sha=repr(facts.model_sha256),
                           **parts)


def write(session, facts: DeployFacts, out, notes: list[Note]) -> Deployed:
    res = Deployed("x5-qat", notes=notes)
    data = _data(facts)
    res.unmapped = [f"{u['tensor']}: {u['reason']}" for u in data["UNMAPPED"]]
    mapped = sum(1 for g in data["GROUPS"] for m in g["members"] if m["module"])
    total = sum(len(g["members"]) for g in data["GROUPS"])
    path = out / f"{re.sub(r'[^0-9A-Za-z_]', '_', facts.stem)}_x5_qat.py"  # (an importable module name)
    res.checks.append(f"{mapped} of {total} group member(s) and "
                      f"{sum(1 for c in data['PRECISION'] if c['module'])} of {len(data['PRECISION'])} precision "
                      f"choice(s) name a module from their ONNX scope; the rest are listed in UNMAPPED")
    head = Header(
        title="horizon_plugin_pytorch QAT setup for RDK X5 (March.BAYES_E)",
        does=["(a) fixed scales: each group's producer modules get one FixedScaleObserver qconfig at the group's "
              "scale (qint8), by module name: qconfig_dict() for prepare_qat_fx's 'module_name', qconfig_setter() "
              "for newer plugins' ModuleNameQconfigSetter, set_qconfigs() for eager prepare_qat",
              "(b) or prepare_unified(): prepare_qat(optimize_graph=True, optimize_kwargs={'opt_types': "
              "('unify_inputs_scale',), 'methods': ('cat',)}): one observer for each cat's producers",
              "int16 choices: a qint16 FixedScaleObserver at the int16 scale; float choices: qconfig None",
              "module_names(model) checks every name against your model (with qtquant's resolver when "
              "qtquant[torch] is importable) and lists what does not map"],
        use=[f"from {path.stem} import qconfig_dict, set_march_bayes_e",
             "set_march_bayes_e()",
             "qat_model = prepare_qat_fx(model, qconfig_dict(model, default=get_default_qconfig()))",
             "... train ...",
             f"python {path.name}    # prints the mapping and how to check the compiled model"],
        cannot=["the plugin is not installed where this was written: the plugin calls are unverified; the data, "
                "the name mapping and the same plan through torch.ao's FX bridge are tested",
                "unify_inputs_scale: the plugin's docs say it is effective on Bernoulli (X3); on X5 it is "
                "unverified",
                "a cat reused for several call sites is an error the plugin reports: one FloatFunctional per "
                "cat call site (CAT_SITES lists them)",
                "module names come from the ONNX export's scopes: a model whose modules were renamed, or whose "
                "export was traced differently, needs ALIASES"],
        checked=res.checks, notes=notes)
    res.checks.append("the module compiles; it imports the plugin only inside the functions that use it")
    source = module_source(facts, head)
    compile(source, str(path), "exec")  # (a template or quoting slip is a bug: never shipped)
    res.files.append(atomic_write_text(path, source, inputs=[session.graph.path], what="x5-qat module"))
    res.files.append(head.write_readme(out, "x5-qat", facts, [session.graph.path]))
    return res


TEMPLATE = '''\
"""horizon_plugin_pytorch QAT setup written by qtquant deploy --target x5-qat (see the header below).

Plain data first (GROUPS, PRECISION, UNMAPPED, CAT_SITES), then the functions that turn it into the
plugin's qconfigs.  The plugin is imported only inside those functions.
"""
{header}
from __future__ import annotations

MODEL = {model}
MODEL_SHA256 = {sha}
MARCH = "BAYES_E"  # RDK X5 (March.BAYES is J5)

# One fixed scale per group: every member's producer module gets a FixedScaleObserver at "scale".
GROUPS = {GROUPS}

# int16 (a qint16 FixedScaleObserver at scale16, the same range as its int8 scale) and float
# (qconfig None: the module stays float) choices.
PRECISION = {PRECISION}

# Members whose ONNX name gives no module: listed, never dropped.  Map them in ALIASES.
UNMAPPED = {UNMAPPED}

# Each Concat of a group: its call site needs a FloatFunctional of its own (a reused one is an
# error the plugin reports).
CAT_SITES = {CAT_SITES}

# tensor -> module name, for names the export's scopes do not give (yours to fill in).
ALIASES: dict = {{}}

HOW_TO_CHECK = """\\
After prepare and training, compile and count the rescales the plugin's tools report:
  from horizon_plugin_pytorch.quantization import check_model   # hbdk's check/perf tools;
  check_model(qat_model, example_inputs, march="bayes-e")        # the import path varies by release
  perf_model(...)  # its layer list: count the "_rescale_" entries; a group that took effect leaves
                   # none at its Concat.  qtquant's compile-log reader does the same from the log.
"""


def _members() -> list:
    out = [dict(m, group=g["id"]) for g in GROUPS for m in g["members"]]
    return out + [dict(c, group=None) for c in PRECISION]


def module_names(model=None):
    """(tensor -> module name, [unmapped: {{tensor, group, reason}}]) for every group member and
    precision choice.  With ``model``: checked against it, by qtquant's resolver when qtquant[torch]
    is importable, else against its named_modules()."""
    members = _members()
    if model is not None:
        try:
            from qtquant.torch.horizon import resolve_modules
        except ImportError:
            resolve_modules = None
        if resolve_modules is not None:
            return resolve_modules(model, members, aliases=ALIASES)
    known = None if model is None else {{n for n, _ in model.named_modules()}}
    mapped, unmapped = {{}}, []
    for m in members:
        name = ALIASES.get(m["tensor"]) or m["module"]
        if not name:
            unmapped.append({{"tensor": m["tensor"], "group": m["group"], "reason": m["why"]}})
        elif known is not None and name not in known:
            why = f"the model has no module {{name}}"
            unmapped.append({{"tensor": m["tensor"], "group": m["group"], "reason": why}})
        else:
            mapped[m["tensor"]] = name
    return mapped, unmapped


def entries(model=None) -> list:
    """[(module name, kind, scale, dtype, group)]: kind "fixed" (a group's scale, qint8), "int16"
    (qint16 at scale16) or "float" (no qconfig).  Pure data: no plugin needed."""
    mapped, _ = module_names(model)
    out = {{}}

    def put(name, entry, tensor):
        if name in out and out[name][1:4] != entry[1:4]:
            raise ValueError(f"module {{name}} would get two qconfigs ({{tensor}}): name one of them in ALIASES")
        out[name] = entry

    for g in GROUPS:
        for m in g["members"]:
            if m["tensor"] in mapped:
                put(mapped[m["tensor"]], (mapped[m["tensor"]], "fixed", g["scale"], "qint8", g["id"]), m["tensor"])
    for c in PRECISION:
        name = mapped.get(c["tensor"])
        if name is None:
            continue
        out.pop(name, None)  # the precision choice replaces the int8 fixed scale of its group
        entry = (name, "int16", c["scale16"], "qint16", None) if c["precision"] == "int16" else \\
            (name, "float", None, None, None)
        put(name, entry, c["tensor"])
    return list(out.values())


def _plugin():
    """The plugin's pieces this module uses; an ImportError saying so when it is not installed."""
    try:
        import horizon_plugin_pytorch  # noqa: F401
    except ImportError as e:
        raise ImportError("horizon_plugin_pytorch is not installed: GROUPS, PRECISION, module_names() and "
                          "entries() work without it; the qconfigs need it") from e
    from types import SimpleNamespace

    from horizon_plugin_pytorch.dtype import qint8, qint16
    from horizon_plugin_pytorch.march import March, set_march
    from horizon_plugin_pytorch.quantization import get_default_qconfig, prepare_qat
    try:
        from horizon_plugin_pytorch.quantization.observer_v2 import FixedScaleObserver
    except ImportError:
        from horizon_plugin_pytorch.quantization.observer import FixedScaleObserver
    return SimpleNamespace(qint8=qint8, qint16=qint16, March=March, set_march=set_march,
                           get_default_qconfig=get_default_qconfig, prepare_qat=prepare_qat,
                           FixedScaleObserver=FixedScaleObserver)


def set_march_bayes_e() -> None:
    p = _plugin()
    p.set_march(p.March.BAYES_E)


def plugin_qconfig(scale: float, dtype: str):
    """One fixed-scale qconfig: get_default_qconfig(activation_qkwargs={{observer, scale, dtype}})."""
    p = _plugin()
    return p.get_default_qconfig(activation_qkwargs={{"observer": p.FixedScaleObserver, "scale": scale,
                                                      "dtype": getattr(p, dtype)}})


def qconfigs(model=None, make=None) -> list:
    """[(module name, qconfig)]; ``make(scale, dtype)`` builds one (default: :func:`plugin_qconfig`);
    float choices get None."""
    make = make or plugin_qconfig
    return [(name, None if kind == "float" else make(scale, dtype)) for name, kind, scale, dtype, _ in entries(model)]


def qconfig_dict(model=None, default=None, make=None) -> dict:
    """For prepare_qat_fx: {{"": default, "module_name": [(name, qconfig), ...]}}."""
    return {{"": default, "module_name": qconfigs(model, make)}}


def qconfig_setter(model=None, make=None):
    """For newer plugins' prepare(..., qconfig_setter=...)."""
    from horizon_plugin_pytorch.quantization.qconfig_template import ModuleNameQconfigSetter

    return ModuleNameQconfigSetter(dict(qconfigs(model, make)))


def set_qconfigs(model, make=None) -> None:
    """Eager mode (prepare_qat): each module's .qconfig attribute."""
    for name, qc in qconfigs(model, make):
        model.get_submodule(name).qconfig = qc


def prepare_unified(model, example_inputs=None):
    """(b) The plugin's own sharing: one observer for every producer of a cat's inputs."""
    p = _plugin()
    p.set_march(p.March.BAYES_E)
    kw = {{}} if example_inputs is None else {{"example_inputs": example_inputs}}
    return p.prepare_qat(model, optimize_graph=True,
                         optimize_kwargs={{"opt_types": ("unify_inputs_scale",), "methods": ("cat",)}}, **kw)


if __name__ == "__main__":
    mapped, unmapped = module_names()
    print(f"{{MODEL}}: {{len(GROUPS)}} group(s), {{len(PRECISION)}} precision choice(s), "
          f"{{len(mapped)}} name(s) mapped to modules, {{len(unmapped)}} unmapped")
    for name, kind, scale, dtype, group in entries():
        print(f"  {{name}}: {{kind}}" + (f" scale {{scale:.6g}} {{dtype}}" if scale is not None else "")
              + (f" (group {{group}})" if group is not None else ""))
    for u in unmapped:
        print(f"  unmapped: {{u['tensor']}}: {{u['reason']}}")
    print(HOW_TO_CHECK)
'''
