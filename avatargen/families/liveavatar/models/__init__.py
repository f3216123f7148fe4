"""LiveAvatar's models: the causal Wan2.2-S2V DiT (dit.py) and its parts, under the reference's tensor names."""
