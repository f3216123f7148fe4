"""LiveAvatar (Alibaba-Quark): causal, 4-step, block-streaming Wan2.2-S2V with a rolling KV cache."""
