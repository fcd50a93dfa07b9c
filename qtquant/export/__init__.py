"""Export: the fixed QDQ model, onnxruntime TensorQuantOverrides, atomic writes."""

from .qdq import ExportResult, build_qdq_model, export_qdq

__all__ = ["ExportResult", "build_qdq_model", "export_qdq"]
