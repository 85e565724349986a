"""Replay results: the per-job table, the summary, the output folder and the paper-vs-ours tables."""
