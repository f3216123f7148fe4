"""LiveAvatar (``model=liveavatar|liveavatar_tiny``): its config (config.py, ``FAMILY``), models (models/), parts
and set (build.py), chunk steps (chunks.py) and engine (engine.py, ``ENGINE``). Each block continues from the last
through its KV rings (no I chunks), it renders the whole picture, and its decoder stream is state saved with the
rings after each block (no overlapped emission)."""
