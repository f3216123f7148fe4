"""The bundled model family (``model=tiny``): its config (config.py, ``FAMILY``: what a config needs, without torch),
its models (models/), their parts and set (build.py), its stages (stages/) and chunk steps (chunks.py), its engine
(engine.py, ``ENGINE``), its training recipe (train/) and its shipped checkpoint (checkpoint/)."""
