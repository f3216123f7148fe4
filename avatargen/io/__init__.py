"""I/O: audio in (``audio``), the reference image in (``image``), MP4 out (``mp4_writer``), all via ``ffmpeg``."""
