"""The pipeline: the graph of stages, the N/I chunk schedule and the rolling state."""
