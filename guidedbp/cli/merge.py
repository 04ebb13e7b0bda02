"""``guidedbp merge-manifests OUT``: join the manifests of a sharded run."""

from __future__ import annotations

import click

from guidedbp.cli.common import UsageFailure


@click.command("merge-manifests")
@click.argument("output", metavar="OUT", type=click.Path(exists=True, file_okay=False))
def merge_command(output: str) -> None:
    """Join OUT/manifest-K-of-N.jsonl (K = 0..N-1) into OUT/manifest.jsonl.

    Records keep the order of the shards (K ascending), then of their lines.
    Refuses (exit 2) when a shard is missing, shards of different N are mixed, or an
    input appears in two shards; the shard manifests are left in place.

    \b
    Example, after `guidedbp explain ... -o maps --shard K/4` for K = 0, 1, 2, 3:
      guidedbp merge-manifests maps
    """
    from guidedbp.io.shard import ShardError, merge_manifests

    try:
        path, shards, records = merge_manifests(output)
    except ShardError as error:
        raise UsageFailure(str(error)) from None
    click.echo(f"{records} records from {shards} shards -> {path}", err=True)
