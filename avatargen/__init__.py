"""avatargen: talking-avatar videos of any length from a reference image and an audio track."""

__version__ = "0.1.0"
