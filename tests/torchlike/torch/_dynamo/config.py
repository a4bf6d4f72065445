"""Mirrors torch/_dynamo/config.py (the flags the stand-in reads)."""
# Without it, an op whose output shape depends on the data (nonzero, x[mask]) breaks the graph
# and runs eagerly.
capture_dynamic_output_shape_ops = False
