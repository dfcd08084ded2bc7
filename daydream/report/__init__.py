"""The report: its data model, the computation of windows, steps, trust and summaries, comparisons."""
