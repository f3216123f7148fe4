"""The Wan2.1 family (``model=infinitetalk|multitalk|wan_tiny``): its config (config.py, ``FAMILY``), models
(models/), parts and set (build.py), stages (stages/), chunk steps (chunks.py) and engine (engine.py, ``ENGINE``).
Its clips continue from their motion frames (no I chunks by default), it renders the whole picture at its own
resolution, and a clip's motion frames are the frames the last one showed (no overlapped emission)."""
