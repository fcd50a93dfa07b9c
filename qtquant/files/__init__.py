"""The formats qtquant writes and reads back: sharing plans, ``.qtquant`` projects and the analysis
report.
"""
