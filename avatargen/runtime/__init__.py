"""Runtime: where the weights live and how the ranks work together.

placement (the one placement pass), tensor_source (memory-mapped checkpoints), offload (the policies), sharding
(FSDP2), world + distributed (torchrun, process group, failures), numa (CPU pinning), memory (host readings).
"""
