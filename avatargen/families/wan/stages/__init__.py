"""The Wan family's stages: the reference and audio context (prompts, CLIP tokens, audio windows), the guided clip
sampler, the prompt tokenizers."""
