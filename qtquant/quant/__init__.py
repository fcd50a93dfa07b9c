"""The quantization rules: scale domains, the user's groups, the Concat analysis, model outputs and
their slices, mixed precision and auto-share.
"""
