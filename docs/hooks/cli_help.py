"""The command line page shows each command's ``--help`` as click formats it.

A line ``<!-- click: NAME -->`` in ``docs/cli.md`` (``guidedbp`` for the group, else a
command's name) is followed by a text block of that command's help, made by click from
the command itself at a fixed width. The page is committed with the help in it, so that
it reads whole on GitHub too; ``make docs-cli`` (``python docs/hooks/cli_help.py``)
writes it again after a command changes, and ``tests/test_docs.py`` fails while the
committed text differs from the commands' own. As a MkDocs hook it puts the current help
in the built page whatever the committed text says; an unknown name fails the build.
Importing guidedbp's command line imports no TensorFlow.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    from mkdocs.exceptions import PluginError
except ImportError:  # tests/test_docs.py and make docs-cli use this file without MkDocs
    PluginError = ValueError

#: ``<!-- click: NAME -->`` alone on its line, and the text block of its help after it
#: (absent before the first ``make docs-cli``).
MARKER = re.compile(r"^<!-- click: ([\w-]+) -->$(\n```text\n.*?\n```$)?", re.M | re.S)

#: The help's width in characters: what a code block of the Material theme shows unwrapped.
WIDTH = 88

#: The page that holds the markers.
PAGE = Path(__file__).resolve().parents[1] / "cli.md"


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
    """Each marker of ``markdown`` followed by its command's current help, in a ``text``
    block (in place of the block it had)."""
    return MARKER.sub(lambda found: f"<!-- click: {found[1]} -->\n```text\n"
                                    f"{help_text(found[1])}\n```", markdown)


def on_page_markdown(markdown: str, **_) -> str:
    return replace_markers(markdown)


def main() -> int:
    """``make docs-cli``: write :data:`PAGE` again with the commands' current help."""
    text = PAGE.read_text(encoding="utf-8")
    updated = replace_markers(text)
    if updated != text:
        PAGE.write_text(updated, encoding="utf-8")
    print(f"{PAGE.relative_to(Path.cwd()) if PAGE.is_relative_to(Path.cwd()) else PAGE}: "
          f"{'updated' if updated != text else 'already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
