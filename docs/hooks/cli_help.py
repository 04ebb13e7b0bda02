"""MkDocs hook: the command line page shows each command's ``--help`` as click formats it.

A line ``<!-- click: NAME -->`` in a page (``guidedbp`` for the group, else a command's
name) becomes a text block of that command's help, made by click from the command itself
at a fixed width, so the page cannot drift from the commands. An unknown name fails the
build. Importing guidedbp's command line imports no TensorFlow.
"""

from __future__ import annotations

import re

try:
    from mkdocs.exceptions import PluginError
except ImportError:  # tests/test_docs.py imports this hook without MkDocs
    PluginError = ValueError

#: ``<!-- click: NAME -->`` alone on its line.
MARKER = re.compile(r"^<!-- click: ([\w-]+) -->$", re.MULTILINE)

#: The help's width in characters: what a code block of the Material theme shows unwrapped.
WIDTH = 88


def help_text(name: str) -> str:
    """``guidedbp NAME --help`` (``guidedbp --help`` for ``"guidedbp"``), as click prints it."""
    from guidedbp.cli import main

    root = main.make_context("guidedbp", [], resilient_parsing=True, terminal_width=WIDTH)
    if name == "guidedbp":
        return main.get_help(root)
    command = main.get_command(root, name)
    if command is None:
        raise PluginError(f"<!-- click: {name} -->: guidedbp has no command {name!r}")
    context = command.make_context(name, [], parent=root, resilient_parsing=True)
    return command.get_help(context)


def replace_markers(markdown: str) -> str:
    """Each marker of ``markdown`` replaced by its command's help, in a ``text`` block."""
    return MARKER.sub(lambda found: f"```text\n{help_text(found[1])}\n```", markdown)


def on_page_markdown(markdown: str, **_) -> str:
    return replace_markers(markdown)
