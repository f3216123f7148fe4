"""Faces in images and video frames: one detector (dlib, the ``avatargen[eval]`` extra) shared by the evaluator
(``avatargen.eval``) and by face framing of the reference image (``pipeline.image_fit=face``)."""
