"""How far what ships is from the float model: the fidelity check (:mod:`.measure`), its runs and
report, error metrics, the written file against its QDQ source (:mod:`.filecompare`) and the
accuracy debugger (:mod:`.accuracy`).
"""
