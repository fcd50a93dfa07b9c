"""The model: loading an ONNX file into a shape-resolved :class:`~qtquant.model.graphmodel.Graph`
(:mod:`.graph`), its items and node table, the checks made before onnx sees a file, the op registry
and opsets, reading QDQ files, cutting, the scale arithmetic (:mod:`.scales`) and onnxruntime
sessions over a graph (:mod:`.runtime`).
"""
