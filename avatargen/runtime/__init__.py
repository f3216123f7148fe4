"""Runtime: devices, threads, and (later) offload and distributed placement."""
