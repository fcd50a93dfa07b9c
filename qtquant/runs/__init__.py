"""Running the exported model: the shipped file's session options, segments, onnxruntime's optimised
programs, the incremental runner and tensor fingerprints, and check samples run in batches.
"""
