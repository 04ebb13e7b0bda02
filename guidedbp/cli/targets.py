"""``--target SPEC``: what a command explains beyond a class, as the user writes it.

The specs themselves (``class:C``, ``unit:I``, ``unit:I,J,K``, ``region:C``,
``similar:IMAGE``) are parsed by :func:`guidedbp.pipeline.targets.parse_target`, which
explain runs share; this module turns them into click's errors and help, for every
command that takes them.

>>> parse_target("region:circle").as_target().label
'region:circle'
"""

from __future__ import annotations

import click

from guidedbp.pipeline.targets import KINDS, TargetSpec, TargetSpecError, parse_target

__all__ = ["KINDS", "TARGET_HELP", "TargetSpec", "complete_target", "parse_target",
           "parse_targets"]

TARGET_HELP = ("What to explain instead of a class (repeatable; all share one forward pass): "
               "class:C (index or name), unit:I or unit:I,J,K (one raw output unit: "
               "regression, multi-label), region:C (a segmentation map's class C over the "
               "pixels the model gives it, or --mask-dir's masks), similar:IMAGE (cosine "
               "similarity of the output to IMAGE's: an embedding).")


def parse_targets(ctx, param, value) -> tuple[TargetSpec, ...]:
    """A click callback: every ``--target`` parsed, or a one-line ``BadParameter``."""
    try:
        return tuple(parse_target(text) for text in value or ())
    except TargetSpecError as error:
        raise click.BadParameter(str(error), ctx, param) from None


def complete_target(ctx, param, incomplete: str) -> list:
    """Shell completion: the kinds (``uni<TAB>`` -> ``unit:``)."""
    from click.shell_completion import CompletionItem

    return [CompletionItem(f"{kind}:") for kind in KINDS if f"{kind}:".startswith(incomplete)]
