"""One render request, end to end (session.py): what the user asked for and its checks (request.py), its inputs
opened for the engine (inputs.py), the reference compositor (compositing.py). The CLI parses arguments and prints;
everything a render does lives here, so scripts can call ``render()`` too.

Importing this package costs nothing: the session and the compositor (OpenCV, the engine) are imported when first
asked for, so that the CLI checks a request (request.py) before it pays for them. torch comes only with a model: a
render whose compositor reads none of its frames never imports it."""

from avatargen.render.request import STREAM, RenderRequest, config_path_for, partial_path_for

__all__ = ["STREAM", "RenderOptions", "RenderRequest", "RenderSession", "compositor_for", "config_path_for",
           "partial_path_for", "render"]  # fmt: skip


def __getattr__(name: str):
    """The names of session.py and compositing.py, imported on first use (PEP 562)."""
    if name in ("RenderOptions", "RenderSession", "render"):
        from avatargen.render import session

        return getattr(session, name)
    if name == "compositor_for":
        from avatargen.render.compositing import compositor_for

        return compositor_for
    raise AttributeError(f"module 'avatargen.render' has no attribute '{name}'")
