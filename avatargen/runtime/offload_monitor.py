"""What placement cost during one render: stage switches, copies, residency and device memory (``OffloadMonitor``).

The policies of avatargen/runtime/offload.py report here. Torch is imported only where a CUDA device is measured, so a
render that places nothing (a photograph with its speech, avatargen/pipeline/blank.py) keeps the same books and the
same ``--json`` report without importing it.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

Span = tuple["torch.cuda.Event", "torch.cuda.Event"]  # (start, end) recorded on a CUDA stream


def timing_event() -> "torch.cuda.Event":
    """A CUDA event that records its time (recorded later, on a stream)."""
    import torch

    return torch.cuda.Event(enable_timing=True)


def mark_event(device: "torch.device") -> "torch.cuda.Event":
    """A timing event recorded now on ``device``'s current (compute) stream."""
    import torch

    event = timing_event()
    event.record(torch.cuda.current_stream(device))
    return event


# -- measurements --------------------------------------------------------------------------------------------------


@dataclass
class _Switch:
    """One stage entry: from the end of the previous stage's work to the first compute of this one."""

    host_s: float = 0.0  # CPU: time in the exit and entry hooks and waiting for block 0
    spans: list[Span] = field(default_factory=list)  # CUDA: event pairs whose elapsed times add up to the gap


class OffloadMonitor:
    """What placement cost during one render; one monitor is shared by the five Modules of a model set.

    Measured: stage switches (the visible gap between stages), host-to-device bytes and achieved GB/s, loads and
    evictions, the most blocks of one model resident at once, peak device memory. On CUDA the times come from CUDA
    events, read back lazily, so measuring adds no synchronisation inside the render. On CPU nothing is copied
    (0 bytes, no GB/s) and a switch costs the host time spent in the placement hooks.
    ``trace=True`` also keeps every (event, module, block) for tests: it grows with the render, so it is off by default.
    """

    def __init__(self, policy: str, resident_blocks: int, device: "torch.device | str", trace: bool = False):
        self.policy = policy
        self.resident_blocks = resident_blocks
        self.device = device
        self.cuda = str(device).startswith("cuda")
        self.trace: list[tuple[str, str, int | None]] | None = [] if trace else None
        self.pinned_bytes = 0  # page-locked host buffers of the offloaded models (set once, at placement)
        # Stages can enter and leave on two threads at once (runtime.overlap: A2V beside SR and the decoder); their
        # switches then interleave, and are counted as they come.
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Start a new render: zero the counters (and the device's peak-memory statistics)."""
        self.switches, self.switch_ms_sum, self.switch_ms_max = 0, 0.0, 0.0
        self.loads = self.evictions = self.h2d_bytes = 0
        self.copy_ms = 0.0
        self.max_resident_blocks = 0
        self._open: _Switch | None = None
        self._exit_s = 0.0  # host time of the last exit, charged to the next switch
        self._last_end: "torch.cuda.Event | None" = None  # CUDA: the end of the last stage's work
        self._pending_switches: deque[_Switch] = deque()
        self._pending_copies: deque[tuple[Span, int]] = deque()
        if self.trace is not None:
            self.trace.clear()
        if self.cuda:
            import torch

            torch.cuda.reset_peak_memory_stats(self.device)

    # Stage entry and exit (called by Placement.active).

    def entering(self) -> None:
        with self._lock:
            self._close_switch()
            self._open = _Switch(host_s=self._exit_s)
            self._exit_s = 0.0
            if self.cuda:
                first = self._last_end is None  # the first stage: from now
                start = mark_event(self.device) if first else self._last_end
                self._open.spans.append((start, start))  # completed by entered()

    def entered(self, host_s: float) -> None:
        with self._lock:
            if self._open is None:  # closed by a stage that left on another thread (overlapped emission)
                return
            self._open.host_s += host_s
            if self.cuda:
                ready = mark_event(self.device)  # after the compute stream's wait for the group the stage needs first
                self._open.spans[-1] = (self._open.spans[-1][0], ready)

    def first_block(self, host_s: float, span: Span | None) -> None:
        """The wait for block 0 in the first forward after a stage entry (it belongs to the switch)."""
        if self._open is not None:
            self._open.host_s += host_s
            if span is not None:
                self._open.spans.append(span)

    def leaving(self) -> None:
        with self._lock:
            self._close_switch()
            if self.cuda:
                self._last_end = mark_event(self.device)  # after the stage's last kernel on the compute stream

    def left(self, host_s: float) -> None:
        with self._lock:
            self._exit_s += host_s

    # Copies and residency (called by the placements).

    def loaded(self, module: str, block: int | None, nbytes: int, span: Span | None) -> None:
        self.loads += 1
        if span is not None:
            self.h2d_bytes += nbytes
            self._pending_copies.append((span, nbytes))
            self._resolve(wait=False)
        self.note("load", module, block)

    def evicted(self, module: str, block: int | None) -> None:
        self.evictions += 1
        self.note("evict", module, block)

    def pinned(self, nbytes: int) -> None:
        """A flat host buffer of ``nbytes`` was page-locked for the models' weights."""
        self.pinned_bytes += nbytes

    def resident(self, blocks: int) -> None:
        self.max_resident_blocks = max(self.max_resident_blocks, blocks)

    def note(self, event: str, module: str, block: int | None) -> None:
        if self.trace is not None:
            self.trace.append((event, module, block))

    def report(self) -> dict[str, Any]:
        """The ``offload`` dict of ``avatargen render --json`` (waits for the device's outstanding events)."""
        self._close_switch()
        self._resolve(wait=True)
        mean = self.switch_ms_sum / self.switches if self.switches else None
        gbps = self.h2d_bytes / (self.copy_ms / 1e3) / 1e9 if self.cuda and self.copy_ms > 0 else None
        block = self.policy == "block"
        peak_mb = None
        if self.cuda:
            import torch

            peak_mb = round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1)
        return {
            "policy": self.policy,
            "resident_blocks": self.resident_blocks if block else None,
            "switches": self.switches,
            "switch_ms_mean": round(mean, 3) if mean is not None else None,
            "switch_ms_max": round(self.switch_ms_max, 3) if self.switches else None,
            "h2d_bytes": self.h2d_bytes,
            "h2d_gbps": round(gbps, 2) if gbps is not None else None,
            "loads": self.loads,
            "evictions": self.evictions,
            "max_resident_blocks": self.max_resident_blocks if block else None,
            "peak_device_mb": peak_mb,
            "pinned_host_mb": round(self.pinned_bytes / 2**20, 1) if self.cuda else None,
        }

    def _close_switch(self) -> None:
        if self._open is None:
            return
        if self.cuda:
            self._pending_switches.append(self._open)
            self._resolve(wait=False)
        else:
            self._add_switch(self._open.host_s * 1e3)
        self._open = None

    def _add_switch(self, ms: float) -> None:
        self.switches += 1
        self.switch_ms_sum += ms
        self.switch_ms_max = max(self.switch_ms_max, ms)

    def _resolve(self, wait: bool) -> None:
        """Fold the CUDA measurements whose events have completed (all of them when ``wait``) into the totals.
        At most 256 stay pending, so a long render keeps a bounded list."""
        while self._pending_switches:
            switch = self._pending_switches[0]
            if not self._done([end for _, end in switch.spans], wait or len(self._pending_switches) > 256):
                break
            self._pending_switches.popleft()
            self._add_switch(sum(start.elapsed_time(end) for start, end in switch.spans))
        while self._pending_copies:
            (start, end), _ = self._pending_copies[0]
            if not self._done([end], wait or len(self._pending_copies) > 256):
                break
            self._pending_copies.popleft()
            self.copy_ms += start.elapsed_time(end)

    @staticmethod
    def _done(events: list["torch.cuda.Event"], wait: bool) -> bool:
        if wait:
            for event in events:
                event.synchronize()
            return True
        return all(event.query() for event in events)
