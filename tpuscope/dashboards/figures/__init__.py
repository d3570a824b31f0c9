"""Pure figure builders: DataFrames in, Plotly figures out (no Dash, no disk, no globals).

They are unit-tested without a browser and timed by benchmarks/dashboard.py. Each
one bounds what it sends to the browser (min/max decimation, longest-N events,
binned heatmaps), so a run of 100k steps or a trace of millions of events
stays a few thousand marks.
"""
