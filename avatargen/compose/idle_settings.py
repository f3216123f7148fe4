"""What idle motion is asked to do (``pipeline.idle_motion``), checked, apart from the motion itself so that a config
validates without torch."""

from __future__ import annotations

from dataclasses import dataclass

from avatargen.errors import ConfigError


@dataclass(frozen=True)
class IdleMotionSettings:
    """``head_motion``: sway on/off; ``head_amplitude``: its size in pixels per 100 px of face width (peak of the
    sway; the eval measures a 5-95 % range of about twice it); ``blinks_per_minute``: mean rate, 0 = no blinks;
    ``blink_seconds``: closing + shut + opening."""

    head_motion: bool = True
    head_amplitude: float = 1.5
    blinks_per_minute: float = 15.0
    blink_seconds: float = 0.2

    def __post_init__(self) -> None:
        if not 0.0 <= self.head_amplitude <= 10.0:
            raise ConfigError(f"pipeline.idle_motion.head_amplitude={self.head_amplitude}: use 0-10 px per 100 px of face width")
        if not 0.0 <= self.blinks_per_minute <= 60.0:
            raise ConfigError(f"pipeline.idle_motion.blinks_per_minute={self.blinks_per_minute}: use 0 (off) to 60")
        if not 0.05 <= self.blink_seconds <= 1.0:
            raise ConfigError(f"pipeline.idle_motion.blink_seconds={self.blink_seconds}: use 0.05-1.0 s")

    @property
    def active(self) -> bool:
        """False when these settings move nothing (the hook can then be left out)."""
        return (self.head_motion and self.head_amplitude > 0) or self.blinks_per_minute > 0
