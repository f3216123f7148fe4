"""The peak RSS a render reports is its own (not inherited from whoever started it), and freed tensors leave it."""

import platform
import subprocess
import sys
import textwrap

import pytest


def test_peak_rss_ignores_the_parents_high_water_mark():
    # The parent touches ~800 MiB and frees it, then starts a child that reports its peak: Linux's ru_maxrss would
    # say ~800 MiB (carried across exec), which made a 60-minute soak report a 2.2 GiB peak for a 436 MiB render.
    script = textwrap.dedent(
        """
        import subprocess, sys
        block = bytearray(800 * 1024 * 1024)
        block[:: 4096] = b"x" * len(block[:: 4096])
        del block
        child = "from avatargen.runtime.memory import peak_rss_mb; print(peak_rss_mb())"
        print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout)
        """
    )
    reported = float(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)
    assert 5 < reported < 300, f"child reported {reported} MiB"



def _resident_left_by_freed_tensors(mapped: bool) -> float:
    """MiB resident beyond the live tensors after 30 tensors of ~2 MiB were freed, each below a tensor that stays
    (as a decode's activations sit below the causal cache it keeps), in a fresh process."""
    script = textwrap.dedent(
        f"""
        import torch
        from avatargen.runtime.memory import current_rss_mb, map_large_allocations, process_trimmer
        if {mapped}:
            assert map_large_allocations() and process_trimmer().interval_s == 0  # and trimmed after every segment
        torch.ones(4 << 20)  # 16 MiB, freed at once: glibc's default threshold rises, what follows is from its heap
        kept, before = [], current_rss_mb()
        for i in range(30):
            activation = torch.ones((512 << 10) + i * 2048)  # (2 MiB + i * 8 KiB) floats: no earlier hole fits it
            kept.append(torch.ones(640 << 10))  # 2.5 MiB that stays, above it
            del activation
        print(current_rss_mb() - before - sum(t.numel() * 4 for t in kept) / 2**20)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return float(done.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator")
def test_a_freed_activation_leaves_at_once_when_large_allocations_are_mapped():
    # The Wan pipeline maps large allocations: without it a wan_tiny render's peak was its worst segment's heap
    # (30-170 MB above the live tensors: more segments, a higher peak); here ~60 MiB of freed tensors stay resident.
    assert _resident_left_by_freed_tensors(mapped=False) > 40  # glibc's default: the holes stay resident
    assert _resident_left_by_freed_tensors(mapped=True) < 8


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator")
def test_the_bundled_models_freed_tensors_are_reused_until_the_trimmer_gives_them_back():
    # A segment of the bundled model frees its activations and the next one allocates the same again: kept in the
    # heap, they are reused without faulting a page in afresh (trimmed after every segment, a render spent ~10 % of
    # its CPU in page faults); every few seconds the trimmer gives them back, so the resident size stays flat.
    script = textwrap.dedent(
        """
        import resource, torch
        from avatargen.runtime.memory import TRIM_INTERVAL_S, HeapTrimmer, current_rss_mb, keep_freed_heap, process_trimmer
        assert keep_freed_heap() and process_trimmer().interval_s == TRIM_INTERVAL_S
        now = [0.0]
        trim = HeapTrimmer(interval_s=5.0, clock=lambda: now[0])
        before = current_rss_mb()

        def segment():  # 48 activations of 1-2 MiB alive at once, written, then freed
            activations = [torch.ones((256 << 10) + i * 5000) for i in range(48)]
            return sum(float(a[-1]) for a in activations)

        segment()
        kept = current_rss_mb() - before
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        segment()
        refaulted = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) * resource.getpagesize() / 2**20
        now[0] = 4.9
        early = trim()
        now[0] = 5.0
        print(kept, refaulted, early, trim(), current_rss_mb() - before)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    kept, refaulted, early, trimmed, left = done.stdout.split()
    assert float(kept) > 40, "the freed activations should stay in the heap for the next segment"
    assert float(refaulted) < 4, f"the next segment faulted {refaulted} MiB in again"
    assert (early, trimmed) == ("False", "True"), "one trim per interval"
    assert float(left) < 8, f"{left} MiB still resident after the trim"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator")
def test_a_render_that_runs_no_model_keeps_its_freed_heap_between_segments_too():
    # A photograph's compositor allocates the same arrays every frame: trimmed after every segment, they were faulted
    # in afresh (581k page faults per 120 s of video against 359k: docs/speed-measures.md).
    script = textwrap.dedent(
        """
        from avatargen.pipeline.blank import BlankSteps
        from avatargen.runtime.memory import TRIM_INTERVAL_S, process_trimmer
        assert process_trimmer().interval_s == 0.0  # untouched: trimmed after every segment
        BlankSteps(None, 256).start(None, "", None, None, None)
        print(process_trimmer().interval_s == TRIM_INTERVAL_S)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True"], done.stdout
