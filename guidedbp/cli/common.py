"""Options shared by several commands, defined once, and the error policy.

Exit codes: 0 success, 1 failed work (some inputs failed), 2 usage, model or
load errors. Expected errors print one line; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import functools
import os
import sys

import click

from guidedbp._text import one_line
from guidedbp.models.preprocess import PREPROCESS_MODES, RESIZE_MODES


class UsageFailure(click.ClickException):
    """A bad model, option or class: one line, exit code 2."""

    exit_code = 2


def parse_methods(ctx, param, value: str) -> tuple[str, ...]:
    """A ``--method`` value: a comma list of guidedbp.METHODS, or ``all``."""
    from guidedbp import METHODS

    if value.strip().lower() == "all":
        return METHODS
    names = tuple(dict.fromkeys(n.strip().lower() for n in value.split(",") if n.strip()))
    unknown = [n for n in names if n not in METHODS]
    if unknown or not names:
        raise click.BadParameter(
            f"{', '.join(unknown) or 'nothing'}: choose from {', '.join(METHODS)} or all", ctx, param
        )
    return names


def _parse_size(ctx, param, value):
    if value is None:
        return None
    parts = value.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise click.BadParameter(f"{value!r} is not HxW, e.g. 224x224", ctx, param)
    return int(parts[0]), int(parts[1])


def model_options(function):
    """The options that say how to load a MODEL and feed it images."""
    options = [
        click.option("--signature", default="serving_default", show_default=True,
                     help="SavedModel signature to explain."),
        click.option("--input-key", default=None,
                     help="SavedModel signature input holding the image, where it has several."),
        click.option("--output-key", default=None,
                     help="SavedModel signature output holding the class scores, where it has several."),
        click.option("--weights", default="imagenet", show_default=True, metavar="imagenet|none|PATH",
                     help="Weights for keras:NAME models. 'none' is a random network: its maps "
                          "are edge maps, not explanations."),
        click.option("--unsafe-deserialization", is_flag=True,
                     help="Allow Lambda layers, whose code runs when the model loads. Only for "
                          "files you trust."),
        click.option("--custom-objects", metavar="FILE_OR_MODULE",
                     help="Python file or module defining the model's custom Keras classes."),
        click.option("--preprocess", type=click.Choice(PREPROCESS_MODES), default=None,
                     help="Pixel preprocessing. Default: the keras:NAME model's own, else 'none' "
                          "(raw 0-255 pixels, for models with a Rescaling layer inside)."),
        click.option("--labels", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="Class names: text (one per line), JSON list or index->name JSON."),
        click.option("--size", callback=_parse_size, metavar="HxW", default=None,
                     help="Input size for models with free spatial dimensions "
                          "(default: each image's own size)."),
        click.option("--resize", type=click.Choice(RESIZE_MODES), default="stretch",
                     show_default=True,
                     help="How an image is fitted to the model's input size: stretch, "
                          "crop (centre, keeps aspect) or pad (letterbox, keeps aspect)."),
        debug_option,
    ]
    for option in reversed(options):
        function = option(function)
    return function


debug_option = click.option("--debug", is_flag=True, help="Show tracebacks for errors.")


def load_options(kwargs: dict) -> dict:
    """The keyword arguments of guidedbp.load_model among a command's options."""
    keys = ("signature", "input_key", "output_key", "weights", "unsafe_deserialization",
            "custom_objects", "preprocess", "labels")
    return {key: kwargs[key] for key in keys}


def import_tensorflow(debug: bool = False) -> None:
    """Import TensorFlow with its C++ start-up chatter kept off the user's terminal.

    TensorFlow logs from C++ while it loads (CUDA probing, oneDNN notices), before
    any Python setting applies. We point file descriptor 2 at a temporary file for
    the import alone and replay what it caught only if the import fails.
    """
    if "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if debug:
        import tensorflow  # noqa: F401
        return
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        except BaseException:
            os.dup2(saved, 2)
            caught.seek(0)
            sys.stderr.write(caught.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def errors_handled(function):
    """Turn expected errors into one-line messages with the documented exit codes."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        debug = kwargs.get("debug", False)
        from guidedbp.models.labels import ClassNameError
        from guidedbp.models.loading import ModelLoadError

        try:
            return function(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except (ModelLoadError, ClassNameError) as error:
            if debug:
                raise
            raise UsageFailure(str(error)) from None
        except Exception as error:  # unexpected: still one line unless --debug
            if debug:
                raise
            raise UsageFailure(
                f"{type(error).__name__}: {one_line(error)[:300]} "
                "(rerun with --debug for the traceback)"
            ) from None

    return wrapper


def echo_err(message: str) -> None:
    click.echo(message, err=True)
    sys.stderr.flush()
