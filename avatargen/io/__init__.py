"""I/O, all via ffmpeg: audio in (``audio``: files, ``audio_stream``: stdin), the reference image in (``image``), and
out: one encoder (``encoder``) feeding the MP4 file and live outputs (``outputs``), paced by ``pacing`` if asked."""
