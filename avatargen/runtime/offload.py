"""Where a module's weights live while its stage runs and while it waits: the policies behind ``Module.active()``.

``runtime.offload`` picks one policy for every module:

- ``none``: every model stays on the device for the whole render.
- ``model``: a model's whole weights are copied to the device when its stage is entered; when it is left the
  device copy is dropped and nothing is copied back (the pinned host buffer stays the source of truth; diffusers'
  ``enable_model_cpu_offload`` copies back). The baseline.
- ``block``: weights live in pinned host memory (one flat buffer per block, one for the rest), which stays the
  source of truth. Entering a stage copies everything outside the model's declared block stacks (embeddings, norms,
  heads; all of a model that declares none) as one group, and block 0; while block n computes, blocks up to n + resident_blocks - 1 are copied on a side CUDA stream; after its
  forward a block's device copies are dropped. Leaving a stage copies nothing back: the parameters point at their
  pinned host tensors again. A DiT runs its blocks once per sampling step (SR: once per frame batch), so after the
  last block the prefetch wraps around to block 0.

Timeline of one DiT stage under ``block`` with resident_blocks=2 (4 blocks; ``|`` = a CUDA event)::

    copy stream     rest b0 | b1        | b2        | b3        | b0 (wrap) | b1 ...
    compute stream    wait  | embed  b0 | b1        | b2        | b3 head   | embed b0 (next step) ...
                                     ^ each block waits on the event of its own copy, then its copies are dropped
                                       with record_stream, so the allocator reuses them only after its kernels ran

On a CPU device the same hooks run and keep the same books (loads, evictions, resident blocks), but nothing is
copied: ``tensor.to(cpu)`` of a host tensor returns that tensor, and there are no streams or events.
The buffers themselves are allocated and filled by the placement pass (``runtime/placement.py``), which hands the
policy its groups; under FSDP sharding FSDP owns the weights and the module's policy is ``Unmanaged``. All offloaded
models of a process share one copy stream per device.

Every model-owned tensor is treated as constant during inference (true of all five models: the VAE's causal cache
is passed in and out of ``decode``, and ``latent_mean/std`` are set once after training). A buffer written in place
inside a stage would be lost under ``block``, whose host copy is the only one kept.
"""

from __future__ import annotations

import time
import weakref
from collections import deque
from contextlib import contextmanager
from functools import partial
from typing import Any, Iterator

import torch
from torch import Tensor, nn

from avatargen.runtime.offload_monitor import OffloadMonitor, Span, mark_event, timing_event

# -- policies ------------------------------------------------------------------------------------------------------


class Placement:
    """Base of the policies: ``active()`` brackets a stage with the policy's entry and exit and measures both."""

    policy = "none"

    def __init__(self, model: nn.Module, device: torch.device, monitor: OffloadMonitor, name: str):
        self.model = model
        self.device = device
        self.monitor = monitor
        self.name = name

    @contextmanager
    def active(self) -> Iterator[nn.Module]:
        """The model, ready to run on the device for the duration of the block."""
        self.monitor.entering()
        started = time.perf_counter()
        try:
            self._enter()  # inside the try: a failed copy (out of memory) still leaves the model idle and clean
            self.monitor.entered(time.perf_counter() - started)
            yield self.model
        finally:
            self.monitor.leaving()
            started = time.perf_counter()
            self._exit()
            self.monitor.left(time.perf_counter() - started)

    def _enter(self) -> None:
        pass

    def _exit(self) -> None:
        pass


class Resident(Placement):
    """``none``: the model lives on the device (placed there by ``runtime.placement.place``); switches move nothing."""

    policy = "none"


class Unmanaged(Placement):
    """``fsdp``: FSDP places the (sharded) weights itself; entries and exits are only measured."""

    policy = "fsdp"


class WholeModel(Placement):
    """``model``: the whole model to the device on entry, on the compute stream (the stage waits for all of it).

    The baseline ``block`` is measured against: diffusers' ``enable_model_cpu_offload`` moves models the same way.
    Like ``block`` (and unlike diffusers, which copies the weights back), its flat pinned host buffer is the source
    of truth, so leaving a stage copies nothing back and every entry is one asynchronous copy from pinned memory.
    """

    policy = "model"

    def __init__(self, model: nn.Module, device: torch.device, monitor: OffloadMonitor, name: str, group: "FlatGroup"):
        super().__init__(model, device, monitor, name)
        self.cuda = device.type == "cuda"
        self.group = group

    def _enter(self) -> None:
        start = mark_event(self.device) if self.cuda else None
        self.group.load(self.device, copy_stream=None)
        span = (start, mark_event(self.device)) if start is not None else None
        self.monitor.loaded(self.name, None, self.group.nbytes, span)

    def _exit(self) -> None:
        self.group.evict()
        self.monitor.evicted(self.name, None)


_ALIGN = 256  # bytes: every tensor of a flat buffer starts at a multiple (CUDA kernels' widest vector loads)


def _span_elements(tensor: Tensor) -> int:
    """Elements of storage a tensor of this shape and stride spans (channels-last weights keep their strides)."""
    if tensor.numel() == 0:
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))


Layout = list[tuple[int, int, torch.dtype, torch.Size, tuple[int, ...]]]  # (byte offset, bytes, dtype, shape, stride)


def _views(flat: Tensor, layout: Layout) -> list[Tensor]:
    """The tensors of a flat byte buffer, each a view (no copy) with its dtype, shape and strides."""
    return [flat[offset : offset + nbytes].view(dtype).as_strided(shape, stride) for offset, nbytes, dtype, shape, stride in layout]


class FlatGroup:
    """Tensors that come to the device together (one block, or everything outside the blocks) in one flat buffer.

    Per-tensor pinned allocations round up to powers of two (the caching host allocator's blocks) and cost one
    copy each; one flat buffer per group is one allocation and one host-to-device copy, and wastes only the 256-byte
    alignment padding. The host buffer (pinned for CUDA) is the source of truth: ``load`` points the model's
    tensors at views of a fresh device copy, ``evict`` points them back at the host views, copying nothing back.
    """

    def __init__(self, flat: Tensor, layout: Layout):
        self.host_flat = flat
        self.layout = layout
        self.host = _views(flat, layout)
        self.tensors: list[Tensor] = []  # the model's parameters and buffers, set once they hang from the model
        self.nbytes = flat.numel()
        self.resident = False
        self.ready: torch.cuda.Event | None = None  # CUDA: recorded on the copy stream after the copy

    @classmethod
    def allocate(cls, slots: list[Any], dtypes: list[torch.dtype], device: torch.device, pin: bool) -> "FlatGroup":
        """An uninitialised flat buffer on ``device`` laid out for ``slots`` (their ``tensor`` shapes and strides)
        in ``dtypes``; pinned when ``pin`` (host memory for CUDA copies)."""
        layout, offset = [], 0
        for slot, dtype in zip(slots, dtypes):
            tensor = slot.tensor
            nbytes = max(_span_elements(tensor), 1) * torch.empty((), dtype=dtype).element_size()
            layout.append((offset, nbytes, dtype, tensor.shape, tuple(tensor.stride())))
            offset += -(-nbytes // _ALIGN) * _ALIGN
        flat = pinned_bytes(offset) if pin else torch.empty(offset, dtype=torch.uint8, device=device)
        return cls(flat, layout)

    def load(self, device: torch.device, copy_stream: "torch.cuda.Stream | None") -> Span | None:
        """Start the host-to-device copy; returns the copy's (start, end) events on CUDA."""
        self.resident = True
        if copy_stream is None:  # on the current stream; on a CPU .to(cpu) of a host tensor is that tensor
            flat = self.host_flat.to(device, non_blocking=True)
            views = self.host if flat is self.host_flat else _views(flat, self.layout)
            for tensor, view in zip(self.tensors, views):
                tensor.data = view
            return None
        compute = torch.cuda.current_stream(device)
        start, self.ready = timing_event(), timing_event()
        with torch.cuda.stream(copy_stream):  # allocation and copy on the side stream
            start.record(copy_stream)
            flat = self.host_flat.to(device, non_blocking=True)  # pinned -> one async DMA
            self.ready.record(copy_stream)
        # Allocated on the copy stream, read on the compute stream: without this the allocator could hand the memory
        # to the next prefetch as soon as Python drops it, while kernels still read it.
        flat.record_stream(compute)
        for tensor, view in zip(self.tensors, _views(flat, self.layout)):
            tensor.data = view
        return start, self.ready

    def wait(self, device: torch.device) -> None:
        """Make the compute stream wait for this group's copy (the host does not block)."""
        if self.ready is not None:
            torch.cuda.current_stream(device).wait_event(self.ready)

    def evict(self) -> None:
        for tensor, host in zip(self.tensors, self.host):
            tensor.data = host
        self.resident = False
        self.ready = None


def pinned_bytes(nbytes: int) -> Tensor:
    """``nbytes`` of page-locked host memory, exactly: pageable memory registered with ``cudaHostRegister``.

    ``pin_memory=True`` goes through torch's caching host allocator, which rounds every allocation up to a power of
    two (a 93 MB block would pin 128 MB). Registered memory is pinned byte for byte and unregistered when the
    tensor is collected. Where registering fails, the caching allocator is the fallback.
    """
    flat = torch.empty(nbytes, dtype=torch.uint8)
    try:
        cudart = torch.cuda.cudart()
        if nbytes == 0 or int(cudart.cudaHostRegister(flat.data_ptr(), nbytes, 0)) != 0:
            raise RuntimeError("cudaHostRegister failed")
    except (RuntimeError, AttributeError, TypeError):
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    weakref.finalize(flat, cudart.cudaHostUnregister, flat.data_ptr())
    return flat


_copy_streams: dict[torch.device, "torch.cuda.Stream"] = {}


def copy_stream(device: torch.device) -> "torch.cuda.Stream | None":
    """The one side stream of this process that carries host-to-device weight copies to ``device`` (None on CPU):
    shared by every offloaded model, so copies of different models never compete for the copy engine."""
    if device.type != "cuda":
        return None
    key = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
    if key not in _copy_streams:
        _copy_streams[key] = torch.cuda.Stream(key)
    return _copy_streams[key]


class BlockRelease:
    """A block's device copy was dropped after its forward: reusable once the kernels queued until now have run.

    On CUDA it wraps an event on the compute stream; on a CPU there is nothing to wait for, but the bookkeeping is the
    same (which block's release the host waited on is traced), so tests see the order the GPU path keeps."""

    def __init__(self, block: int, device: torch.device):
        self.block = block
        self.event: torch.cuda.Event | None = None
        if device.type == "cuda":
            self.event = torch.cuda.Event()
            self.event.record(torch.cuda.current_stream(device))

    def wait(self) -> None:
        if self.event is not None:
            self.event.synchronize()


class BlockStream(Placement):
    """``block``: flat pinned host buffers; the rest group on stage entry, the blocks just in time.

    ``resident_blocks`` (>= 1) bounds how many of the model's blocks are on the device at once: block n and up to
    ``resident_blocks - 1`` prefetched after it. With 1 there is no prefetch (each block is copied in its own
    pre-hook); with at least as many as the model has, the blocks stay for the whole stage and are copied once.
    A model that declares no block stacks is one rest group here.

    The host runs ahead of the GPU. Before it copies block n+1 (in block n's pre-hook) it waits until block n-2's
    kernels have run, not block n-1's: block n-1 may still compute while n's kernels and n+1's copy are queued, so
    the GPU is never idle between blocks, and device memory stays bounded by ``resident_blocks`` blocks plus the
    one still computing.
    """

    policy = "block"

    def __init__(
        self,
        model: nn.Module,
        device: torch.device,
        monitor: OffloadMonitor,
        name: str,
        resident_blocks: int,
        rest: FlatGroup,
        groups: list[FlatGroup],
        blocks: list[nn.Module],
    ):
        super().__init__(model, device, monitor, name)
        if resident_blocks < 1:
            raise ValueError(f"resident_blocks must be >= 1, got {resident_blocks}")
        self.resident_blocks = resident_blocks
        self.copy_stream = copy_stream(device)
        self.rest, self.blocks = rest, groups
        self._released: deque[BlockRelease] = deque()  # dropped blocks whose kernels may still be queued
        self._active = False  # hooks only place weights inside active(); a bare call runs on the host copies
        self._first_pending = False  # the first forward after entry: its wait for block 0 is part of the switch
        self._hooks = []
        for index, block in enumerate(blocks):
            self._hooks.append(block.register_forward_pre_hook(partial(self._before_block, index)))
            self._hooks.append(block.register_forward_hook(partial(self._after_block, index)))

    @property
    def n_resident(self) -> int:
        return sum(group.resident for group in self.blocks)

    def _enter(self) -> None:
        self._active = True
        self._load_group(self.rest, None)
        if self.blocks:
            self._load_block(0, keep=[0])  # overlaps the embeddings, which only wait for the rest group
            self._first_pending = True
        self.rest.wait(self.device)

    def _exit(self) -> None:
        # Nothing is copied back: the host copies were never stale. Evicting only repoints the tensors.
        for index, group in enumerate(self.blocks):
            if group.resident:
                group.evict()
                self.monitor.evicted(self.name, index)
        self.rest.evict()
        self.monitor.evicted(self.name, None)
        self._active = self._first_pending = False

    def _before_block(self, index: int, module: nn.Module, args: Any) -> None:
        """Forward pre-hook of block ``index``: prefetch the blocks after it, then wait for its own copies."""
        if not self._active:
            return
        started = time.perf_counter()
        count = len(self.blocks)
        window = [(index + k) % count for k in range(min(self.resident_blocks, count))]  # wraps: the next step
        for ahead in window:  # window[0] is this block: loaded here only when it was not prefetched
            self._load_block(ahead, keep=window)
        self.monitor.note("compute", self.name, index)
        # The first block after entry: events before and after the compute stream's wait measure its stall.
        before = mark_event(self.device) if self._first_pending and self.copy_stream is not None else None
        self.blocks[index].wait(self.device)
        if self._first_pending:
            span = (before, mark_event(self.device)) if before is not None else None
            self.monitor.first_block(time.perf_counter() - started, span)
            self._first_pending = False

    def _after_block(self, index: int, module: nn.Module, args: Any, output: Any) -> None:
        """Forward hook of block ``index``: drop its device copy unless every block fits at once."""
        if not self._active or self.resident_blocks >= len(self.blocks):
            return
        self._evict_block(index)

    def _evict_block(self, index: int) -> None:
        self.blocks[index].evict()
        self.monitor.evicted(self.name, index)
        self._released.append(BlockRelease(index, self.device))

    def _load_block(self, index: int, keep: list[int]) -> None:
        """Copy block ``index`` to the device unless it is there; first make room by evicting blocks not in ``keep``
        (only when blocks ran out of the expected order), so at most ``resident_blocks`` are ever resident."""
        group = self.blocks[index]
        if group.resident:
            return
        while self.n_resident >= self.resident_blocks:
            victim = next(i for i, g in enumerate(self.blocks) if g.resident and i not in keep)
            self._evict_block(victim)
        while len(self._released) > 1:  # all but the latest release: block n-2's kernels, not n-1's, must be done
            released = self._released.popleft()
            released.wait()
            self.monitor.note("waited", self.name, released.block)
        self._load_group(group, index)
        self.monitor.resident(self.n_resident)

    def _load_group(self, group: FlatGroup, index: int | None) -> None:
        span = group.load(self.device, self.copy_stream)
        self.monitor.loaded(self.name, index, group.nbytes, span)
