"""``guidedbp report OUT``: rebuild OUT/index.html, the page that browses a run."""

from __future__ import annotations

import os

import click

from guidedbp._text import shown_name
from guidedbp.cli.exits import errors_handled
from guidedbp.cli.flags import FolderOrURL


@click.command("report")
@click.argument("output", metavar="OUT", type=FolderOrURL(exists=True, file_okay=False))
@click.option("--manifest", "manifest", default="manifest.jsonl", show_default=True,
              metavar="NAME", help="The manifest inside OUT to show (e.g. a shard's, "
                                   "manifest-0-of-4.jsonl).")
@click.option("--title", default=None,
              help="The page's title (default: 'guidedbp report: ' and OUT's folder name).")
@errors_handled
def report_command(output: str, manifest: str, title: str | None) -> None:
    """Write OUT/index.html from OUT/manifest.jsonl: one page, no network needed, to
    browse the run's maps by status, class and score and read why inputs failed.

    The page is rebuilt from the manifest each time; an index.html that guidedbp did
    not write, or a link in its place, is refused (exit 2) and left as it is.

    \b
    Example, after `guidedbp explain ... -o maps`:
      guidedbp report maps
      open maps/index.html        (or xdg-open; or any browser: file:// works)
    """
    from guidedbp.io.manifest import read_manifest
    from guidedbp.io.report import write_report

    path = write_report(output, manifest, title=title)
    inputs = len(read_manifest(os.path.join(output, manifest)))
    click.echo(f"report: {shown_name(path)} ({inputs} {'input' if inputs == 1 else 'inputs'})",
               err=True)
