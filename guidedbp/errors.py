"""guidedbp's expected errors: the ones a user causes and can fix from a one-line message.

A leaf module (it imports nothing from guidedbp), so that every room can raise these
and every client (the CLI, checks, a notebook) can catch them without importing more.
Messages name Python parameters (``weights='none'``, ``unsafe_deserialization=True``),
never command-line flags: the CLI translates them into its own spelling.
"""

from __future__ import annotations

__all__ = ["ArgumentError", "GuidedbpError", "ModelLoadError"]


class GuidedbpError(Exception):
    """An expected error with a one-line message meant for the user (bad model, input or
    argument)."""


class ModelLoadError(GuidedbpError):
    """A model could not be loaded; the message is one line meant for the user."""


class ArgumentError(GuidedbpError, ValueError):
    """A bad argument, image or option value, or a model that cannot be explained as
    asked; the message names the parameter and what was expected."""
