"""``guidedbp merge-manifests OUT``: join the manifests of a sharded run."""

from __future__ import annotations

import click

from guidedbp._text import one_line, shown_name
from guidedbp.cli.exits import errors_handled
from guidedbp.cli.flags import FolderOrURL


@click.command("merge-manifests")
@click.argument("output", metavar="OUT", type=FolderOrURL(exists=True, file_okay=False))
@errors_handled
def merge_command(output: str) -> None:
    """Join OUT/manifest-K-of-N.jsonl (K = 0..N-1) into OUT/manifest.jsonl.

    Records keep the order of the shards (K ascending), then of their lines.
    Refuses (exit 2, one line naming the file and line) when a shard is missing or
    not a regular file, shards of different N are mixed, a name says N = 0 or K >= N,
    a line is not a UTF-8 JSON object with an "input", an input appears in two
    shards, shards were made differently (by another model, with other options that
    change the maps or pictures, or before records said what made them: explain the
    odd shard again with --skip-existing), OUT/manifest.jsonl is a file guidedbp
    did not write or a link (as explain refuses it), or a run still writes into OUT
    (a shard, or a run without --shard). N counts only as far as the
    shard files there are. Every shard is checked before OUT/manifest.jsonl is
    replaced, whole, by a rename, so a refused merge leaves it as it was; the shard
    manifests are always left in place.

    Then OUT/index.html, the page that browses the run (see `guidedbp report`), is
    rebuilt from the merged manifest; should that be refused (an index.html guidedbp
    did not write), a warning says so and the merge still succeeds.

    \b
    Example, after `guidedbp explain ... -o maps --shard K/4` for K = 0, 1, 2, 3:
      guidedbp merge-manifests maps
    """
    from guidedbp.io.report import ReportError, write_report
    from guidedbp.io.shard import MERGED_MANIFEST, merge_manifests

    path, shards, records = merge_manifests(output)
    click.echo(f"{records} records from {shards} shards -> {shown_name(path)}", err=True)
    try:
        report = write_report(output, MERGED_MANIFEST)
    except ReportError as error:  # the merge itself is done: say so, do not fail it
        click.echo(f"warning: no report: {one_line(error)}", err=True)
        return
    click.echo(f"report: {shown_name(report)} ({records} {'input' if records == 1 else 'inputs'})",
               err=True)
