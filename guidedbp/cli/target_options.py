"""``--target SPEC``: what a command explains beyond a class, as the user writes it.

The specs themselves (``class:C``, ``unit:I``, ``unit:I,J,K``, ``region:C``,
``similar:IMAGE``, ``text:PROMPT``, ``box:X0,Y0,X1,Y1[:C]``) are parsed by
:func:`guidedbp.pipeline.target_specs.parse_target`, which explain runs share; this module
turns them into click's errors and help, for every command that takes them.

>>> parse_target("region:circle").as_target().label
'region:circle'
"""

from __future__ import annotations

import click

from guidedbp.errors import ArgumentError
from guidedbp.pipeline.target_specs import KINDS, TargetSpec, TargetSpecError, parse_target

__all__ = ["DETECTIONS_HELP", "KINDS", "TARGET_HELP", "TargetSpec", "complete_target",
           "parse_detections", "parse_target", "parse_targets"]

TARGET_HELP = ("What to explain instead of a class (repeatable; all share one forward pass): "
               "class:C (index or name), unit:I or unit:I,J,K (one raw output unit: "
               "regression, multi-label), region:C (a segmentation map's class C over the "
               "pixels the model gives it, or --mask-dir's masks), similar:IMAGE (cosine "
               "similarity of the output to IMAGE's: an embedding), text:PROMPT (a CLIP or "
               "SigLIP model's cosine similarity of the image to PROMPT, e.g. "
               "text:'a photo of a cat'; the model a keras-hub preset folder with its "
               "tokenizer), box:X0,Y0,X1,Y1[:C] (a detector's detection of that box, its "
               "corners in each image file's pixels, x right and y down, of class C by index "
               "or name; default: the class it is detected as).")
#: --detections' help.
DETECTIONS_HELP = ("For a detector: explain each image's K best detections (per-class "
                   "non-maximum suppression at IoU 0.5, class score at least "
                   "--detection-threshold), one set of maps each, named PATH.det-1-CLASS.*; "
                   "an image with fewer gets fewer (the summary counts them).")


def parse_detections(ctx, param, value) -> int | None:
    """A click callback: ``top:K`` as K, or a one-line ``BadParameter``."""
    from guidedbp.pipeline.options import parse_detections as parse

    try:
        return parse(value)
    except ArgumentError as error:
        raise click.BadParameter(str(error).replace("detections=", "", 1), ctx, param) \
            from None


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
