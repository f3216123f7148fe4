"""OpenCV (``cv2``), the compositor's resampling, imported once here: an install that cannot load it, or loads a
version older than 5 (whose ``remap`` rounds sample positions to 1/32 pixel), is refused in one line with the fix.
Another package's OpenCV (MediaPipe's ``opencv-contrib-python``, installed by the ``eval`` extra) shares the module."""

from avatargen.errors import MissingExtraError

FIX = "pip install --force-reinstall --no-deps 'opencv-python-headless>=5'"

try:
    import cv2
except ImportError as error:  # e.g. libGL.so.1 missing: a GUI build of OpenCV replaced the headless one
    raise MissingExtraError(f"OpenCV cannot be imported ({error}); reinstall it: {FIX}") from None

if not hasattr(cv2, "remap") or int((getattr(cv2, "__version__", "") or "0").split(".")[0]) < 5:
    raise MissingExtraError(f"OpenCV {getattr(cv2, '__version__', '(broken)')} is installed; avatargen composites "
                            f"with OpenCV 5 or newer: {FIX}")  # fmt: skip

__all__ = ["cv2"]
