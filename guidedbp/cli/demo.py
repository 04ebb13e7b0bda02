"""``guidedbp demo [-o OUT]``: ``make demo``'s job on the samples shipped in the package.

The bundled shapes model explains the six sample shapes that ship inside guidedbp, so a
``pip install`` (of the wheel, with no clone) is enough to see what the tool does.
``guidedbp demo --write-samples DIR`` writes the package's copy of the clone's
``sample_images/`` (shapes, masks, scenes, photographs), which the documentation's
examples name.
"""

from __future__ import annotations

import os
import sys

import click

from guidedbp.cli.exits import UsageFailure, errors_handled
from guidedbp.cli.flags import debug_option
from guidedbp.cli.process import import_tensorflow

#: What the demo writes: one comparison panel and one overlay per shape.
DEMO_RENDERS = ("panel", "overlay")
DEFAULT_DEMO_OUTPUT = "demo-out"


@click.command("demo")
@click.option("-o", "--output", default=DEFAULT_DEMO_OUTPUT, show_default=True, metavar="OUT",
              type=click.Path(file_okay=False), help="Folder for the maps, manifest.jsonl "
                                                     "and index.html.")
@click.option("--write-samples", metavar="DIR", type=click.Path(file_okay=False),
              help="Instead, write the sample pictures the documentation's examples name "
                   "(a clone's sample_images/: shapes, masks, scenes, photographs) into DIR, "
                   "from the package's copy, and exit.")
@click.option("-q", "--quiet", is_flag=True, help="No summary line.")
@debug_option
@errors_handled
def demo_command(output: str, write_samples: str | None, quiet: bool, debug: bool) -> None:
    """Explain the six sample shapes shipped with guidedbp with the bundled demo model.

    The same job as `guidedbp explain demo sample_images/shapes --render panel,overlay
    -o OUT` in a clone, on the package's own copy of the samples, so it needs nothing
    but guidedbp installed: OUT/samples/SHAPE_0.png.guided.panel.png (original | color
    | gray | overlay) and .guided.overlay.png for each shape, then OUT/manifest.jsonl
    and OUT/index.html. Exit codes as for explain.

    \b
    Example:
      guidedbp demo -o demo-out
      open demo-out/index.html        (or xdg-open; file:// works)
      guidedbp demo --write-samples sample_images   (without a clone)
    """
    if write_samples is not None:
        _write_samples(write_samples, quiet)
        return
    from guidedbp.demo.samples import PACKAGED_SAMPLES
    from guidedbp.pipeline.options import RunOptions

    options = RunOptions.of(renders=DEMO_RENDERS)
    import_tensorflow(debug)
    from guidedbp.cli.explain import print_summary
    from guidedbp.pipeline.run import explain_files

    # Each input maps under its own last path component: OUT/samples/SHAPE_0.png...
    summary = explain_files("demo", [os.fspath(PACKAGED_SAMPLES)], output, options=options)
    summary.output = output
    print_summary(summary, quiet=quiet)
    sys.exit(summary.exit_code)


def _write_samples(folder: str, quiet: bool) -> None:
    """``--write-samples DIR``: the package's ``sample_images/`` into ``folder``."""
    from guidedbp.demo.samples import SamplesExistError, copy_samples

    try:
        written = copy_samples(folder)
    except SamplesExistError as error:
        raise UsageFailure(str(error)) from None
    except OSError as error:
        raise UsageFailure(f"cannot write the samples into {folder}: "
                           f"{error.strerror or error}") from None
    if not quiet:
        click.echo(f"{len(written)} sample pictures in {folder}/ (shapes/, masks/shapes/, "
                   "scenes/, photographs)", err=True)
