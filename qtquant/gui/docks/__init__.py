"""The dock widgets: model info, Concat list, perf summary, job log, groups, history, inspector, sensitivity."""
