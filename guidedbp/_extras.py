"""The optional extras, named for what they enable, and the one line that installs each.

Every message about a missing optional library ends with :func:`install`'s command, which
works wherever guidedbp is installed (from a clone, a wheel or an sdist: pip reads the
extra from the installed package). ``tests/test_extras.py`` checks that :data:`EXTRAS`
and ``pyproject.toml``'s extras are the same.

>>> install("plot")
"pip install 'guidedbp[plot]'"
>>> needs("figures", "plot")
"figures need matplotlib: pip install 'guidedbp[plot]'"
"""

from __future__ import annotations

__all__ = ["EXTRAS", "install", "needs"]

#: Each user-facing extra and the library it brings (``docs`` and ``test`` are for
#: working on guidedbp itself).
EXTRAS = {
    "plot": "matplotlib",
    "segments": "scikit-image",
    "ray": "Ray Data",
    "s3": "s3fs",
    "gcs": "gcsfs",
    "azure": "adlfs",
    "tensorboard": "TensorBoard",
    "hub": "keras-hub",
}


def install(extra: str) -> str:
    """The command that installs ``extra``."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}: expected one of {', '.join(EXTRAS)}")
    return f"pip install 'guidedbp[{extra}]'"


def needs(what: str, extra: str) -> str:
    """``"WHAT need(s) LIBRARY: pip install 'guidedbp[EXTRA]'"``: one line for a missing
    optional library (``what`` plural, or a flag's words such as ``"--engine ray"``)."""
    verb = "need" if what.endswith("s") and not what.startswith("-") else "needs"
    return f"{what} {verb} {EXTRAS[extra]}: {install(extra)}"
