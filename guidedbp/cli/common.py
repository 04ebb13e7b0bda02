"""Options shared by several commands, defined once, and the error policy.

Defaults and choices come from the library's option dataclasses
(:class:`~guidedbp.pipeline.options.RunOptions` and its groups): :func:`field_option`
reads them, so a flag cannot drift from the keyword it sets.

Exit codes: 0 success, 1 failed work (some inputs failed), 2 usage, model or input
errors, 3 an unexpected internal error (a bug: rerun with ``--debug`` and report
it), 130 interrupted. Expected errors print one line; ``--debug`` shows the
traceback. Library messages name Python parameters (``unsafe_deserialization=True``);
:func:`as_flags` turns them into this command's flags.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import signal
import sys
import threading
import time
import warnings

import click

from guidedbp._numbers import whole_number
from guidedbp._text import did_you_mean, one_line
from guidedbp.cli.numbers import Number, Whole
from guidedbp.engine.methods.registry import METHODS, as_methods
from guidedbp.engine.options import MAX_BATCH_SIZE, MethodOptions
from guidedbp.errors import GuidedbpError
from guidedbp.io.store import is_url
from guidedbp.models.preprocess import PREPROCESS_MODES, RESIZE_MODES
from guidedbp.pipeline.options import MAX_SIDE, RunOptions


class FolderOrURL(click.Path):
    """A folder, checked as :class:`click.Path` checks it, or an object-store URL
    (``s3://bucket/prefix/``), passed on as it is: the store answers when the run starts."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and is_url(value):
            return value
        return super().convert(value, param, ctx)

#: Exit code of an unexpected internal error (a bug), distinct from usage errors (2).
INTERNAL_ERROR = 3
#: Exit code after Ctrl-C (128 + SIGINT, as a shell reports a process it interrupted).
INTERRUPTED = 130
#: Exit code when standard output closed early (a pipe into ``head``): 128 + SIGPIPE.
BROKEN_PIPE = 141
#: Seconds a command has, after Ctrl-C, to stop by itself before it is ended.
INTERRUPT_GRACE = 1.5
_DEFAULTS = RunOptions().flat()


class UsageFailure(click.ClickException):
    """A bad model, option or class: one line, exit code 2."""

    exit_code = 2


class InternalFailure(click.ClickException):
    """A bug: one line asking for a report, exit code 3."""

    exit_code = INTERNAL_ERROR


def default_of(name: str):
    """The library default of the explain option with flat name ``name``."""
    return _DEFAULTS[name]


def field_option(name: str, *declarations: str, **kwargs):
    """A click option for the library option ``name``, with the library's default.

    Tuples become comma lists (``("color", "overlay")`` -> ``color,overlay``).
    """
    default = default_of(name)
    if isinstance(default, tuple) and not kwargs.get("multiple"):
        default = ",".join(map(str, default))
    shown = default is not None and default != () and default is not False
    kwargs.setdefault("show_default", shown)
    return click.option(*declarations, name, default=default, **kwargs)


def described_method_fields() -> list[dataclasses.Field]:
    """The method options that describe their own flag (``metadata["help"]``), in the
    order of :class:`~guidedbp.engine.options.MethodOptions`' fields and groups."""
    fields = []
    for group in dataclasses.fields(MethodOptions):
        if dataclasses.is_dataclass(group.type) or isinstance(group.default_factory, type):
            kind = group.default_factory
            fields += [f for f in dataclasses.fields(kind) if f.metadata.get("help")]
        elif group.metadata.get("help"):  # a field of its own (precision)
            fields.append(group)
    return fields


def guide_option(command):
    """The ``--guide`` flag of :class:`~guidedbp.engine.options.GuideOptions`, for the
    commands that take no other method option (evaluate)."""
    return _choice_option("guide")(command)


def precision_option(command):
    """The ``--precision`` flag of :class:`~guidedbp.engine.options.MethodOptions`, for
    the commands that take no other method option (evaluate)."""
    return _choice_option("precision")(command)


def _choice_option(name: str):
    spec = next(f for f in described_method_fields() if f.name == name)
    return field_option(name, f"--{name}", type=click.Choice(spec.metadata["choices"]),
                        help=spec.metadata["help"])


def method_flags(command):
    """Add a flag for every described method option (:func:`described_method_fields`).

    A field's metadata gives the help line and, optionally, ``metavar``, ``choices``,
    ``min`` and ``max``; its default gives the type (an ``int`` default: a whole
    number, a ``float``: a number, else text) and the default shown. So a method with
    options of its own needs no edit here: its fields bring their flags.
    """
    for spec in reversed(described_method_fields()):
        metadata = spec.metadata
        default = default_of(spec.name)
        if metadata.get("choices"):
            kind = click.Choice(metadata["choices"])
        elif isinstance(default, bool):
            kind = bool
        elif isinstance(default, int) or metadata.get("integer"):
            kind = Whole(metadata.get("min"), metadata.get("max"))
        elif isinstance(default, float):
            kind = Number(metadata.get("min"), metadata.get("max"))
        else:
            kind = str
        command = field_option(spec.name, f"--{spec.name.replace('_', '-')}", type=kind,
                               metavar=metadata.get("metavar"), help=metadata["help"])(command)
    return command


def described_method_names() -> list[str]:
    """Parameter names of the flags :func:`method_flags` adds, for help groups."""
    return [spec.name for spec in described_method_fields()]


def parse_methods(ctx, param, value: str) -> tuple[str, ...]:
    """A ``--method`` value: a comma list of guidedbp.METHODS, or ``all``."""
    try:
        return as_methods(value)
    except ValueError:
        names = [n.strip().lower() for n in value.split(",") if n.strip()]
        unknown = [n for n in names if n not in METHODS]
        raise click.BadParameter(
            f"{', '.join(unknown) or 'nothing'}: choose from {', '.join(METHODS)} or all"
            + _suggestion(unknown, METHODS), ctx, param,
        ) from None


def parse_run_methods(ctx, param, value: str) -> tuple[str, ...] | str:
    """``explain``'s ``--method``: :func:`parse_methods`, but ``all`` stays ``"all"``: the
    run resolves it against its targets (``drise`` joins where every target is a
    detection)."""
    names = parse_methods(ctx, param, value)
    return "all" if value.strip().lower() == "all" else names


def parse_comma_list(choices):
    """A click callback: a comma list of ``choices``, deduplicated, in order."""

    def parse(ctx, param, value: str) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
        unknown = [n for n in names if n not in choices]
        if unknown or not names:
            raise click.BadParameter(
                f"{', '.join(unknown) or 'nothing'}: choose from {', '.join(choices)}"
                + _suggestion(unknown, choices), ctx, param
            )
        return names

    return parse


def _suggestion(unknown: list[str], choices) -> str:
    hint = did_you_mean(unknown[0], choices) if unknown else ""
    return f" ({hint})" if hint else ""


class Choice(click.Choice):
    """:class:`click.Choice` whose error adds "did you mean" for a close choice."""

    def convert(self, value, param, ctx):
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as error:
            hint = did_you_mean(value, self.choices) if isinstance(value, str) else ""
            if not hint:
                raise
            self.fail(f"{error.message.rstrip('.')} ({hint})", param, ctx)


def complete_comma_list(choices, extra: tuple[str, ...] = ()):
    """Shell completion for a comma list of ``choices``: completes the last name after
    the names already typed, which it leaves out (``--method guided,gr<TAB>`` offers
    ``guided,gradcam``, ``guided,gradcam++``, ...). ``extra`` names (``all``) are offered
    only as the first word."""

    def complete(ctx, param, incomplete: str) -> list:
        from click.shell_completion import CompletionItem

        done, _, last = incomplete.rpartition(",")
        typed = {name.strip() for name in done.split(",") if name.strip()}
        prefix = f"{done}," if done else ""
        names = [*choices, *(extra if not done else ())]
        return [CompletionItem(prefix + name) for name in names
                if name.startswith(last) and name not in typed]

    return complete


class GroupedCommand(click.Command):
    """A command whose ``--help`` lists its options in titled groups.

    ``option_groups`` is a list of ``(title, [parameter names])``; options in no
    group are listed last, under "Other options".
    """

    def __init__(self, *args, option_groups: list[tuple[str, list[str]]] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.option_groups = list(option_groups)

    def format_options(self, ctx, formatter) -> None:
        records = {param.name: param.get_help_record(ctx) for param in self.get_params(ctx)
                   if isinstance(param, click.Option)}
        listed = set()
        for title, names in self.option_groups:
            rows = [records[name] for name in names if records.get(name)]
            listed.update(names)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        rest = [record for name, record in records.items() if record and name not in listed]
        if rest:
            with formatter.section("Other options"):
                formatter.write_dl(rest)


def _parse_size(ctx, param, value):
    if value is None:
        return None
    sides = [whole_number(part) for part in value.lower().split("x")]
    if len(sides) != 2 or not all(side for side in sides):
        raise click.BadParameter(f"{value!r} is not HxW, e.g. 224x224", ctx, param)
    if max(sides) > MAX_SIDE:
        raise click.BadParameter(f"{value!r} is above the upper bound of {MAX_SIDE} pixels a "
                                 "side", ctx, param)
    return sides[0], sides[1]


def model_options(function):
    """The options that say how to load a MODEL and feed it images."""
    options = [
        click.option("--signature", default="serving_default", show_default=True,
                     help="SavedModel signature to explain."),
        click.option("--input-key", default=None,
                     help="SavedModel signature input holding the image, where it has several."),
        click.option("--output-key", default=None,
                     help="SavedModel signature output to load, where it has several; "
                          "without it every output loads (choose one with --model-output)."),
        click.option("--weights", default="imagenet", show_default=True,
                     metavar="imagenet|none|PATH",
                     help="Weights for keras:NAME models. 'none' is a random network: its maps "
                          "are edge maps, not explanations."),
        click.option("--unsafe-deserialization", is_flag=True,
                     help="Allow Lambda layers, whose code runs when the model loads. Only for "
                          "files you trust."),
        click.option("--custom-objects", metavar="FILE_OR_MODULE",
                     help="Python file or module defining the model's custom Keras classes."),
        click.option("--preprocess", type=Choice(PREPROCESS_MODES), default=None,
                     help="Pixel preprocessing. Default: the keras:NAME model's own, else 'none' "
                          "(raw 0-255 pixels, for models with a Rescaling layer inside)."),
        click.option("--labels", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="Class names: text (one per line), JSON list or index->name JSON."),
        field_option("size", "--size", callback=_parse_size, metavar="HxW",
                     help="Input size for models with free spatial dimensions "
                          "(default: each image's own size)."),
        field_option("resize", "--resize", type=Choice(RESIZE_MODES),
                     help="How an image is fitted to the model's input size: stretch, "
                          "crop (centre, keeps aspect) or pad (letterbox, keeps aspect)."),
        debug_option,
    ]
    for option in reversed(options):
        function = option(function)
    return function


debug_option = click.option("--debug", is_flag=True, help="Show tracebacks for errors.")

batch_size_option = field_option(
    "batch_size", "--batch-size", type=Whole(1, MAX_BATCH_SIZE),
    help="Images per engine pass; bounds memory.")

#: The model-loading options, by the keyword of guidedbp.load_model they set.
LOAD_OPTIONS = ("signature", "input_key", "output_key", "weights", "unsafe_deserialization",
                "custom_objects", "preprocess", "labels")


def load_options(kwargs: dict) -> dict:
    """The keyword arguments of guidedbp.load_model among a command's options."""
    return {key: kwargs[key] for key in LOAD_OPTIONS}


def import_tensorflow(debug: bool = False) -> None:
    """Import TensorFlow with its C++ start-up chatter kept off the user's terminal.

    TensorFlow logs from C++ while it loads (CUDA probing, oneDNN notices), before
    any Python setting applies. We point file descriptor 2 at a temporary file for
    the import alone and replay what it caught only if the import fails (not when
    Ctrl-C stops it).
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
        except KeyboardInterrupt:  # Ctrl-C, not a failure: nothing to explain
            raise
        except BaseException:
            os.dup2(saved, 2)
            caught.seek(0)
            sys.stderr.write(caught.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def errors_handled(function):
    """Turn errors into one-line messages with the documented exit codes.

    Expected errors (:class:`~guidedbp.errors.GuidedbpError` and its kin) exit 2 with
    their message in the command's own words; anything else is a bug and exits 3.
    Warnings print as one ``warning: ...`` line each.
    """

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        debug = kwargs.get("debug", False)
        ctx = click.get_current_context(silent=True)
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning(ctx)
            try:
                return function(*args, **kwargs)
            except (click.ClickException, click.exceptions.Exit, click.Abort,
                    KeyboardInterrupt, BrokenPipeError):
                raise
            except GuidedbpError as error:
                if debug:
                    raise
                raise UsageFailure(as_flags(one_line(error), ctx)) from None
            except Exception as error:  # a bug: say so, in one line
                if debug:
                    raise
                raise InternalFailure(
                    f"internal error: {type(error).__name__}: {one_line(error)[:300]} "
                    "(a bug in guidedbp: rerun with --debug for the traceback and report it)"
                ) from None

    return wrapper


def _show_warning(ctx):
    """A ``warnings.showwarning`` that prints ``warning: MESSAGE`` in the command's words."""

    def show(message, category, filename, lineno, file=None, line=None):
        click.echo(f"warning: {as_flags(one_line(str(message)), ctx)}", err=True)

    return show


_PARAMETER = re.compile(r"\b([a-z][a-z0-9_]*)=('[^']*'|\S+)")


def as_flags(message: str, ctx=None) -> str:
    """A library message in the command's words: ``name=VALUE`` -> ``--name VALUE`` for
    each of the command's options (``name=True`` -> ``--name``).

    >>> import click
    >>> command = click.Command("x", params=[click.Option(["--unsafe-deserialization"],
    ...                                                   is_flag=True)])
    >>> as_flags("pass unsafe_deserialization=True to allow it",
    ...          click.Context(command))
    'pass --unsafe-deserialization to allow it'
    """
    if ctx is None:
        return message
    flags = {param.name: param.opts[0] for param in ctx.command.params
             if isinstance(param, click.Option) and param.opts[0].startswith("--")}

    def replace(match: re.Match) -> str:
        name, value = match.group(1), match.group(2)
        if name not in flags:
            return match.group(0)
        if value == "True":
            return flags[name]
        return f"{flags[name]} {value.strip(chr(39))}"

    return _PARAMETER.sub(replace, message)


def echo_err(message: str) -> None:
    click.echo(message, err=True)
    sys.stderr.flush()


# -- Ctrl-C ----------------------------------------------------------------------------------


class Command(click.Group):
    """The ``guidedbp`` group: Ctrl-C at any moment ends it within 2 seconds, exit 130.

    A ``KeyboardInterrupt`` out of a command prints one line, ``interrupted``, and exits
    :data:`INTERRUPTED` (no traceback; click would print "Aborted!" and exit 1). Run as
    a program (``guidedbp``, ``python -m guidedbp``: through ``__call__``, not through
    the ``main`` that click's test runner calls), a :class:`_Deadline` also ends the
    process :data:`INTERRUPT_GRACE` seconds after Ctrl-C if it has not stopped by then:
    Python handles a signal only between bytecodes, and TensorFlow can hold the main
    thread in C++ for longer (a big model's batch, its start-up). Files are safe either
    way: outputs are renamed into place whole and the manifest is written a whole line
    at a time.
    """

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            _SAID.set()
            click.echo("interrupted", err=True)
            raise click.exceptions.Exit(INTERRUPTED) from None
        except BrokenPipeError:
            # The reader went away (`guidedbp check demo | head -1`): stop quietly, as a
            # Unix tool killed by SIGPIPE would, with no traceback at exit.
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            except (OSError, ValueError):
                pass
            raise click.exceptions.Exit(BROKEN_PIPE) from None

    def __call__(self, *args, **kwargs):
        _SAID.clear()
        deadline = _Deadline.start()
        try:
            return super().__call__(*args, **kwargs)
        except SystemExit as exit_:
            if exit_.code != INTERRUPTED:
                raise
            _SAID.set()  # "interrupted", or the command's own summary, is on stderr
        finally:
            if deadline is not None:
                deadline.stop()
        # Interrupted, with files closed: skip the interpreter's teardown, which takes
        # TensorFlow a second or more and which no thread can cut short.
        exit_now(INTERRUPTED)


def exit_now(code: int) -> None:
    """End the process with ``code`` at once (``os._exit``), its output flushed."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def may_skip_teardown(code) -> bool:
    """Whether the program, its command ended with exit status ``code``, may leave at
    once (:func:`exit_now`) rather than through the interpreter's teardown, which takes
    TensorFlow a second or more: TensorFlow was imported (else the teardown is quick),
    no thread of ours is still running, and no library whose exit handlers matter is
    loaded (Ray stops the cluster it started)."""
    return (isinstance(code, int) or code is None) and "tensorflow" in sys.modules \
        and "ray" not in sys.modules \
        and all(thread.daemon or thread is threading.main_thread()
                for thread in threading.enumerate())


# Set once stderr says the command was interrupted: the deadline need not repeat it.
_SAID = threading.Event()


class _Deadline:
    """Ends the process :data:`INTERRUPT_GRACE` seconds after a SIGINT, exit 130.

    Python's C-level signal handler writes the signal number to the wake-up file
    descriptor at once, even while the main thread is busy in C; a daemon thread
    reading it needs no help from the main thread. Main thread only.
    """

    def __init__(self, read: int, write: int, previous: int):
        self._read, self._write, self._previous = read, write, previous
        self._stderr = os.dup(2)  # fd 2 may point elsewhere by then (TensorFlow's import)
        threading.Thread(target=self._watch, name="guidedbp-ctrl-c", daemon=True).start()

    @classmethod
    def start(cls) -> _Deadline | None:
        if threading.current_thread() is not threading.main_thread():
            return None
        read, write = os.pipe()
        os.set_blocking(write, False)
        try:
            previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except (ValueError, OSError):
            os.close(read)
            os.close(write)
            return None
        return cls(read, write, previous)

    def _watch(self) -> None:
        while True:
            try:
                received = os.read(self._read, 64)
            except OSError:
                return
            if not received:
                return  # stop() before any Ctrl-C
            if signal.SIGINT in received:
                break
        time.sleep(INTERRUPT_GRACE)
        if not _SAID.is_set():
            os.write(self._stderr, b"interrupted\n")
        os._exit(INTERRUPTED)

    def stop(self) -> None:
        """Give the wake-up descriptor back. After a Ctrl-C the deadline keeps running:
        the process is on its way out and must get there in time."""
        signal.set_wakeup_fd(self._previous)
        os.close(self._write)  # the watcher reads what came before, then stops
