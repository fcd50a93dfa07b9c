"""Deploy: the session's groups and precision map written in each toolchain's own form.

One module per target (:mod:`.x5_qat`, :mod:`.x5_ptq`, :mod:`.s100`, :mod:`.tensorrt`, :mod:`.ort`),
the targets keyed by :class:`~.targets.Target` in :mod:`.targets`, and the facts they all write from
in :mod:`.facts`.  docs/deploy.md says, per target, what is verified here and what needs the
vendor's tools.
"""

from .facts import DeployFacts, Note
from .targets import TARGETS, Deployed, Target, deploy

__all__ = ["Target", "TARGETS", "DeployFacts", "Note", "Deployed", "deploy"]
