"""The training recipe of the shipped model: VAE -> audio encoder -> (latent cache) -> A2V DiT + text encoder -> SR DiT."""
