"""The hyper-parameters of LiveAvatar's DiT (dit.py) and its named specs, without torch: a config names a spec
(``model.liveavatar.spec``) and is validated against these before any model is built."""

from __future__ import annotations

from dataclasses import dataclass, replace

from avatargen.families.wan.models.named_specs import lookup_spec


@dataclass(frozen=True)
class LiveAvatarParams:
    """Hyper-parameters of :class:`LiveAvatarDiT` (the reference's constructor names)."""

    dim: int = 5120
    ffn_dim: int = 13824
    num_heads: int = 40
    num_layers: int = 40
    freq_dim: int = 256
    text_dim: int = 4096  # umT5-XXL; not in the saved config.json (the reference's default)
    text_len: int = 512
    in_dim: int = 16
    out_dim: int = 16
    cond_dim: int = 16
    audio_dim: int = 1024  # wav2vec2-large
    num_audio_token: int = 4
    audio_inject_layers: tuple[int, ...] = (0, 4, 8, 12, 16, 20, 24, 27, 30, 33, 36, 39)
    patch_size: tuple[int, int, int] = (1, 2, 2)
    eps: float = 1e-6
    norm3_dtype: str = "bfloat16"  # a torch dtype's name: the reference rounds x to bf16 before norm3, also in fp32

    @property
    def head_dim(self) -> int:
        """Channels per head."""
        return self.dim // self.num_heads

    def validate(self) -> None:
        """Raise ValueError naming the bad field."""
        if self.dim % self.num_heads or self.head_dim % 2:
            raise ValueError(f"LiveAvatarParams.dim ({self.dim}) / num_heads ({self.num_heads}) must be even")
        if any(not 0 <= i < self.num_layers for i in self.audio_inject_layers):
            raise ValueError(f"LiveAvatarParams.audio_inject_layers {self.audio_inject_layers} outside 0..{self.num_layers - 1}")


SPECS: dict[str, LiveAvatarParams] = {
    "liveavatar": LiveAvatarParams(),
    "liveavatar_tiny": LiveAvatarParams(
        dim=32, ffn_dim=64, num_heads=2, num_layers=3, freq_dim=16, text_dim=32, text_len=16, audio_dim=16,
        audio_inject_layers=(0, 2),
    ),
}


def dit_params(name: str, **overrides: object) -> LiveAvatarParams:
    """A named spec (``SPECS``), optionally with fields replaced; ValueError naming the spec if unknown."""
    return replace(lookup_spec(SPECS, name, "LiveAvatar"), **overrides)
