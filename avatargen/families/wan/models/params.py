"""The hyper-parameters of the Wan-family models and their named specs, without torch: a config names a spec
(``model.wan.spec``) and is validated against these (``avatargen config``, a batch's job rows) before any model is
built. The architectures that read them are dit.py, vae.py, umt5.py, clip_vision.py and audio_proj.py."""

from __future__ import annotations

from dataclasses import dataclass, replace

from avatargen.families.wan.models.named_specs import lookup_spec


@dataclass(frozen=True)
class AudioAdapterParams:
    """Hyper-parameters of the audio adapter (InfiniteTalk's defaults)."""

    audio_window: int = 5  # wav2vec2 frames per video frame window
    vae_scale: int = 4  # video frames per latent frame after the first
    layers: int = 12  # wav2vec2 hidden states stacked per feature frame
    channels: int = 768  # wav2vec2 width
    intermediate_dim: int = 512
    output_dim: int = 768  # width of the audio context tokens
    context_tokens: int = 32  # audio context tokens per latent frame
    norm_output: bool = True

    @property
    def later_window(self) -> int:
        """Feature frames a latent frame after the first sees (8 with the defaults)."""
        return self.audio_window + self.vae_scale - 1

    def validate(self) -> None:
        """Raise ValueError naming the bad field."""
        if self.audio_window < 1 or self.audio_window % 2 == 0:
            raise ValueError(f"audio_window must be odd and >= 1, got {self.audio_window}")
        for name in ("vae_scale", "layers", "channels", "intermediate_dim", "output_dim", "context_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"AudioAdapterParams.{name} must be >= 1, got {getattr(self, name)}")


CLIP_DIM = 1280  # width of the CLIP ViT-H/14 penultimate-layer tokens that I2V conditions on


@dataclass(frozen=True)
class WanDiTParams:
    """Hyper-parameters of :class:`WanDiT` (names follow the reference's ``config.json``)."""

    dim: int = 5120
    ffn_dim: int = 13824
    num_heads: int = 40
    num_layers: int = 40
    in_dim: int = 36  # I2V: 16 noise + 4 mask + 16 reference-latent channels
    out_dim: int = 16
    text_dim: int = 4096  # umT5-XXL width
    text_len: int = 512  # text tokens are zero-padded to this length, as in the reference
    freq_dim: int = 256
    patch_size: tuple[int, int, int] = (1, 2, 2)
    eps: float = 1e-6
    image_to_video: bool = True  # CLIP image tokens (img_emb, k_img/v_img) in every cross-attention
    clip_dim: int = CLIP_DIM  # width of the CLIP tokens img_emb reads (1280: ViT-H/14; smaller for toy towers)
    audio: AudioAdapterParams | None = None  # InfiniteTalk/MultiTalk adapter

    @property
    def head_dim(self) -> int:
        """Channels per attention head (128 at 14B and 1.3B)."""
        return self.dim // self.num_heads

    def validate(self) -> None:
        """Raise ValueError naming the bad field."""
        for name in ("dim", "ffn_dim", "num_heads", "num_layers", "in_dim", "out_dim", "text_dim", "text_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"WanDiTParams.{name} must be >= 1, got {getattr(self, name)}")
        if self.dim % self.num_heads or self.head_dim % 2:
            raise ValueError(f"WanDiTParams.dim ({self.dim}) / num_heads ({self.num_heads}) must be an even integer")
        if self.freq_dim % 2:
            raise ValueError(f"WanDiTParams.freq_dim must be even, got {self.freq_dim}")
        if len(self.patch_size) != 3 or min(self.patch_size) < 1:
            raise ValueError(f"WanDiTParams.patch_size must be 3 positive ints, got {self.patch_size}")
        if self.audio is not None:
            self.audio.validate()


INFINITETALK_AUDIO = AudioAdapterParams()
DIT_SPECS: dict[str, WanDiTParams] = {
    "wan_i2v_14b": WanDiTParams(),
    "infinitetalk": WanDiTParams(audio=INFINITETALK_AUDIO),
    "multitalk": WanDiTParams(audio=INFINITETALK_AUDIO),  # same modules as InfiniteTalk
    "wan_1_3b": WanDiTParams(
        dim=1536, ffn_dim=8960, num_heads=12, num_layers=30, in_dim=16, image_to_video=False
    ),  # Wan2.1-T2V-1.3B
    "wan_tiny": WanDiTParams(
        dim=64,
        ffn_dim=128,
        num_heads=2,
        num_layers=2,
        text_dim=32,
        text_len=16,
        freq_dim=32,
        audio=AudioAdapterParams(layers=2, channels=16, intermediate_dim=32, output_dim=32, context_tokens=4),
    ),
}


def dit_params(name: str, **overrides: object) -> WanDiTParams:
    """A named spec (``DIT_SPECS``), optionally with fields replaced; ValueError naming the spec if unknown."""
    return replace(lookup_spec(DIT_SPECS, name, "Wan DiT"), **overrides)


LATENT_MEAN = (
    -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
    0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
)  # fmt: skip
LATENT_STD = (
    2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160,
)  # fmt: skip


@dataclass(frozen=True)
class WanVAEParams:
    """Hyper-parameters of :class:`WanVAE` (the reference's ``_video_vae`` configuration by default)."""

    base_dim: int = 96
    z_dim: int = 16
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    temporal_downsample: tuple[bool, ...] = (False, True, True)
    latent_mean: tuple[float, ...] = LATENT_MEAN  # per-channel statistics the DiT's latents are normalised by
    latent_std: tuple[float, ...] = LATENT_STD

    @property
    def spatial_stride(self) -> int:
        """Pixels per latent pixel along height and width (8)."""
        return 2 ** (len(self.dim_mult) - 1)

    @property
    def temporal_stride(self) -> int:
        """Video frames per latent frame after the first (4)."""
        return 2 ** sum(self.temporal_downsample)

    def validate(self) -> None:
        """Raise ValueError naming the bad field."""
        if self.base_dim < 1 or self.z_dim < 1 or self.num_res_blocks < 1:
            raise ValueError("WanVAEParams.base_dim, z_dim and num_res_blocks must be >= 1")
        if len(self.temporal_downsample) != len(self.dim_mult) - 1:
            raise ValueError("WanVAEParams.temporal_downsample needs one entry per downsampling (len(dim_mult) - 1)")
        if len(self.latent_mean) != self.z_dim or len(self.latent_std) != self.z_dim:
            raise ValueError(f"WanVAEParams.latent_mean / latent_std need z_dim ({self.z_dim}) entries each")


VAE_SPECS: dict[str, WanVAEParams] = {
    "wan2_1": WanVAEParams(),
    "wan_tiny": WanVAEParams(base_dim=8),
}


def vae_params(name: str, **overrides: object) -> WanVAEParams:
    """A named spec (``VAE_SPECS``), optionally with fields replaced; ValueError naming the spec if unknown."""
    return replace(lookup_spec(VAE_SPECS, name, "Wan VAE"), **overrides)


@dataclass(frozen=True)
class UMT5Params:
    """Hyper-parameters of :class:`UMT5Encoder` (umT5-XXL by default)."""

    vocab_size: int = 256384
    dim: int = 4096
    dim_attn: int = 4096
    dim_ffn: int = 10240
    num_heads: int = 64
    num_layers: int = 24
    num_buckets: int = 32
    max_distance: int = 128
    eps: float = 1e-6

    def validate(self) -> None:
        """Raise ValueError naming the bad field."""
        if self.dim_attn % self.num_heads:
            raise ValueError(f"UMT5Params.dim_attn ({self.dim_attn}) must be divisible by num_heads ({self.num_heads})")
        if self.num_buckets < 4 or self.num_buckets % 2:
            raise ValueError(f"UMT5Params.num_buckets must be even and >= 4, got {self.num_buckets}")


UMT5_SPECS: dict[str, UMT5Params] = {
    "umt5_xxl": UMT5Params(),
    "umt5_tiny": UMT5Params(vocab_size=100, dim=32, dim_attn=32, dim_ffn=64, num_heads=4, num_layers=2),
}


def umt5_params(name: str, **overrides: object) -> UMT5Params:
    """A named spec (``UMT5_SPECS``), optionally with fields replaced; ValueError naming the spec if unknown."""
    return replace(lookup_spec(UMT5_SPECS, name, "umT5"), **overrides)


@dataclass(frozen=True)
class CLIPVisionParams:
    """Hyper-parameters of :class:`CLIPVisionTower` (open-clip XLM-RoBERTa-large ViT-H/14 by default)."""

    image_size: int = 224
    patch_size: int = 14
    dim: int = 1280
    mlp_ratio: int = 4
    num_heads: int = 16
    num_layers: int = 32
    out_dim: int = 1024  # the unused contrastive head
    layers_used: int = 31  # Wan reads the output of block 31 of 32
    eps: float = 1e-5

    @property
    def tokens(self) -> int:
        """Output tokens: one per patch plus the class token (257 at 224 / 14)."""
        return (self.image_size // self.patch_size) ** 2 + 1

    def validate(self) -> None:
        """Raise ValueError naming the bad field."""
        if self.image_size % self.patch_size:
            raise ValueError(f"CLIPVisionParams.image_size ({self.image_size}) must be a multiple of patch_size")
        if self.dim % self.num_heads:
            raise ValueError(f"CLIPVisionParams.dim ({self.dim}) must be divisible by num_heads ({self.num_heads})")
        if not 1 <= self.layers_used <= self.num_layers:
            raise ValueError(f"CLIPVisionParams.layers_used must be in [1, num_layers], got {self.layers_used}")


CLIP_SPECS: dict[str, CLIPVisionParams] = {
    "clip_vit_h_14": CLIPVisionParams(),
    "clip_tiny": CLIPVisionParams(image_size=28, dim=32, num_heads=4, num_layers=3, out_dim=16, layers_used=2),
}


def clip_params(name: str, **overrides: object) -> CLIPVisionParams:
    """A named spec (``CLIP_SPECS``), optionally with fields replaced; ValueError naming the spec if unknown."""
    return replace(lookup_spec(CLIP_SPECS, name, "CLIP"), **overrides)
