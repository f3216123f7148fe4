"""What a model family implements so that the chunk engine (avatargen/pipeline/pipeline.py) can run it: its
``FamilyEngine`` (the typed contract a render is built from), and the two objects of its chunk steps.

A family's engine declares its models as parts (``model_parts``: avatargen/pipeline/parts.py places them all, one loop
for every family) and wraps them in its model set; it gives the chunk steps over that set, the files a render reads,
and what else a render asks of it (what its ranks can split, how it frames a picture, notes on its inputs). Its
config half, ``FamilyConfig`` (avatargen/config/families.py), names it; a render loads it once (``load_engine``) and
hands it down.

The engine owns everything that is the same for every family: the loop over ``ChunkSchedule.steps``, replay on
resume, stop checks, resume points, emission in timeline order (inline or on a second thread), progress and stats.
A family supplies the steps themselves, in two objects (torchtitan's shape: one loop, a model overrides step methods
only, never the loop):

- ``ChunkSteps``, built once per placed model set: the schedule its chunks follow, how much audio its steps read
  around a chunk, and ``start()``, which encodes one request's reference and prompt (the init phase);
- ``ChunkRun``, what ``start()`` returns: one render's steps (N chunk, I chunk, hand-over, frames of a segment) and
  its output-side state (the decoder's causal cache, frames already shown), which it saves into a resume point and
  restores from one.

The rolling state between chunks (``RollingState``: the N windows later steps read, the last I chunk) belongs to the
engine, which snapshots and saves it; the family's steps read and replace its windows.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

import numpy as np

from avatargen.config.families import FamilyConfig, family_named, load_object
from avatargen.config.schema import Config
from avatargen.errors import ConfigError
from avatargen.runtime.layout import SplittableWork

from avatargen.pipeline.audio_timeline import AudioTimeline
from avatargen.pipeline.inputs import RenderInputs
from avatargen.pipeline.schedule import ChunkSchedule, Emit, IChunk, NChunk

if TYPE_CHECKING:  # types only: a render that runs no model imports no torch (avatargen/pipeline/blank.py)
    import torch
    from torch import Tensor

    from avatargen.modules import Module
    from avatargen.pipeline.parts import ModelPart
    from avatargen.pipeline.state import RollingState
    from avatargen.pipeline.stats import RenderStats
    from avatargen.runtime.distributed import ParallelContext
    from avatargen.runtime.offload import OffloadMonitor
    from avatargen.runtime.precision import Precision


class PlacedModels(Protocol):
    """A family's modules as placed for this process (built once, reused by every render while the config holds)."""

    monitor: OffloadMonitor  # what placement cost (reset per render)
    precision: Precision  # what the forwards compute in (reported, part of the resume fingerprint)


class ChunkRun:
    """One render's steps over a family's models (see the module docstring); ``start()`` has run the init phase.

    ``n_chunk`` and ``i_chunk`` generate into the rolling state; ``hand_over`` takes a segment out of it on the
    generating thread (cheap: the state then lets go of what later steps do not read); ``prepare`` is work on a
    segment that may run on either thread (the engine moves it to the generating thread when the emitting one falls
    behind); ``frames`` turns a segment into uint8 frames (t, H, W, 3), in order, on the emitting thread.
    """

    def n_chunk(self, step: NChunk, audio: AudioTimeline, state: RollingState) -> None:
        raise NotImplementedError

    def i_chunk(self, step: IChunk, audio: AudioTimeline, state: RollingState) -> None:
        raise NotImplementedError

    def hand_over(self, step: Emit, state: RollingState) -> Any:
        raise NotImplementedError

    def prepare(self, segment: Any, step: Emit) -> Any:
        """Work on a segment that may run on either thread; by default none."""
        return segment

    def frames(self, segment: Any, step: Emit) -> Iterator[np.ndarray]:
        raise NotImplementedError

    def save(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """The output-side state after the segments emitted so far: (tensors, JSON-able metadata)."""
        return {}, {}

    def restore(self, tensors: dict[str, Tensor], meta: dict[str, Any]) -> None:
        """Continue from ``save()``'s state of a stopped render (ResumeMismatchError when it cannot)."""

    def stream_ended(self) -> bool:
        """Whether this run's chunks stopped coming from elsewhere (a pipeline stage whose previous stage stopped:
        runtime/pipeline_parallel.py); the engine then stops before the next step, as if asked to. By default never."""
        return False

    def finish(self) -> None:
        """After the last step, on the way out of a render that ran to its end or stopped (not one that failed): a
        pipeline stage tells the next one that no block follows. By default nothing."""


class ChunkSteps(Protocol):
    """A family's chunk steps over its placed models: what the engine needs before a render starts."""

    schedule: ChunkSchedule
    device: torch.device  # where the rolling state's tensors live
    audio_context_frames: int  # audio frames its steps read past a chunk's end (the span waits for them)
    audio_history_frames: int  # audio frames before an N chunk's start that it or later steps still read

    def start(self, reference_rgb: np.ndarray, prompt: str, stats: RenderStats,
              read_box: tuple[int, int, int, int] | None, inputs: RenderInputs) -> ChunkRun:  # fmt: skip
        """The init phase of one request: the reference (uint8 (H, W, 3), framed) and prompt encoded once.

        ``read_box`` (y0, y1, x0, x1) in model-frame pixels is all the sinks read of each frame (None: all of it);
        a family may compute only that part (the frames' other pixels are then zero). ``inputs``: a source video,
        several audio tracks and their regions, the tracks' statistics (pipeline/inputs.py); a family that takes
        none of them (``FamilyEngine.follows_video``, ``FamilyEngine.speakers``) is never handed them."""
        ...


@dataclass(frozen=True)
class Imported:
    """The callable ``"package.module:NAME"`` names, imported on its first call: an engine names its model code so,
    and a render that builds no model (avatargen/pipeline/blank.py) imports none of it, nor torch."""

    reference: str

    def load(self) -> Callable[..., Any]:
        return load_object(self.reference)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.load()(*args, **kwargs)


@dataclass(frozen=True)
class FamilyEngine:
    """A model family as a render runs it; each family's ``engine.py`` defines one as ``ENGINE``.

    ``model_parts(config)``: its models, in the order they load; ``precision(config, device, parallel)``: what they
    compute in; ``model_set(config, modules, monitor, precision, parallel)``: the placed modules (by part name) as its
    ``PlacedModels``; ``chunk_steps(config, models, composited)``: its steps over them (``composited``: whether the
    frames are put back into the reference picture, None: as configured); ``weight_files(config)``: the files a render
    reads (resume fingerprints, never overwritten); ``shipped_checkpoints``: model option -> its checkpoint folder in
    the package. Optional: ``check_weights(config, folder)``, a downloaded folder checked from its headers (``avatargen
    weights check``); ``parallel_work(config)``, what of one render its ranks can split (nothing without it);
    ``framing(config, height, width)``, how it frames a picture of that size itself (None: the square of
    ``pipeline.image_fit``); ``train(recipe, out)``, its recipe run (``avatargen train``; the recipe read by ``FamilyConfig.recipe``); ``reference_notes(config,
    *, picture, square, prompt, composited, warped, is_photo, warn)``, what a render says of its inputs once opened;
    ``schedule(config, composited)``, its chunk schedule without its models: a render whose compositor reads none of
    its frames runs it with no model (avatargen/pipeline/blank.py), with the same keyframes and resume points.
    ``composited``: its frames are the framed face square the compositor puts back into the picture;
    ``follows_video``: it can dub a source video; ``speakers``: audio tracks it routes to as many speakers;
    ``build_threads``: torch's threads while its parts are placed (None: as they are)."""

    family: FamilyConfig
    model_parts: Callable[[Config], list[ModelPart]]
    precision: Callable[[Config, torch.device, ParallelContext], Precision]
    model_set: Callable[[Config, dict[str, Module], OffloadMonitor, Precision, ParallelContext], PlacedModels]
    chunk_steps: Callable[[Config, PlacedModels, bool | None], ChunkSteps]
    weight_files: Callable[[Config], list[Path]]
    shipped_checkpoints: dict[str, Path] = field(default_factory=dict)
    check_weights: Callable[[Config, Path], Any] | None = None
    parallel_work: Callable[[Config], SplittableWork] | None = None
    framing: Callable[[Config, int, int], Any] | None = None
    train: Callable[[Any, Path], dict] | None = None
    reference_notes: Callable[..., None] | None = None
    schedule: Callable[[Config, bool | None], ChunkSchedule] | None = None
    composited: bool = False
    follows_video: bool = False
    speakers: int = 1
    build_threads: int | None = None

    @property
    def name(self) -> str:
        return self.family.name

    @property
    def overlap(self) -> bool:
        return self.family.overlap

    def import_models(self) -> None:
        """Import the model code its fields name (``Imported``) on this thread: a render about to load its models
        on a worker thread imports it first, where the imports would take turns with the face search (a cartoon's
        first byte came ~0.1 s later)."""
        for part in fields(self):
            value = getattr(self, part.name)
            if isinstance(value, Imported):
                value.load()

    def splittable_work(self, config: Config) -> SplittableWork:
        """What one render's ranks can split (nothing where the family declares nothing)."""
        return self.parallel_work(config) if self.parallel_work is not None else SplittableWork()


def load_engine(family: FamilyConfig) -> FamilyEngine:
    """``family``'s engine, imported on first use (its models, torch)."""
    engine = load_object(family.engine)
    if not isinstance(engine, FamilyEngine) or engine.family is not family:
        raise ConfigError(f"'{family.engine}' is not the FamilyEngine of the {family.name} family")
    return engine


def engine_for(config: Config) -> FamilyEngine:
    """The engine of ``config``'s model family (``model.family``), as a render resolves it."""
    return load_engine(family_named(config.model.family))
