"""One render request, end to end (session.py): what the user asked for and its checks (request.py), its inputs
opened for the engine (inputs.py), the reference compositor (compositing.py). The CLI parses arguments and prints;
everything a render does lives here, so scripts can call ``render()`` too."""

from avatargen.render.compositing import compositor_for
from avatargen.render.request import STREAM, RenderRequest, config_path_for, partial_path_for
from avatargen.render.session import RenderOptions, RenderSession, render

__all__ = ["STREAM", "RenderOptions", "RenderRequest", "RenderSession", "compositor_for", "config_path_for",
           "partial_path_for", "render"]  # fmt: skip
