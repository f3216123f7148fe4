"""The Wan family's stages: the context (prompts, CLIP tokens, audio windows), the guided sampler, the tokenizers."""
