"""Runtime: where the weights live (offload), torchrun and FSDP2 sharding, NUMA pinning, memory readings."""
