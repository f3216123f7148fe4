"""The Wan family's stages: the reference and audio context, the guided clip sampler, the prompt tokenizers."""
