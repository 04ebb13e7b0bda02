"""The error policy: exit codes, and errors and warnings as one line in the command's words.

Exit codes: 0 success, 1 failed work (some inputs failed), 2 usage, model or input
errors, 3 an unexpected internal error (a bug: rerun with ``--debug`` and report
it), 130 interrupted. Expected errors print one line; ``--debug`` shows the
traceback. Library messages name Python parameters (``unsafe_deserialization=True``);
:func:`as_flags` turns them into this command's flags.
"""

from __future__ import annotations

import functools
import re
import sys
import warnings

import click

from guidedbp._text import one_line
from guidedbp.errors import GuidedbpError

#: Exit code of an unexpected internal error (a bug), distinct from usage errors (2).
INTERNAL_ERROR = 3
#: Exit code after Ctrl-C (128 + SIGINT, as a shell reports a process it interrupted).
INTERRUPTED = 130
#: Exit code when standard output closed early (a pipe into ``head``): 128 + SIGPIPE.
BROKEN_PIPE = 141


class UsageFailure(click.ClickException):
    """A bad model, option or class: one line, exit code 2."""

    exit_code = 2


class InternalFailure(click.ClickException):
    """A bug: one line asking for a report, exit code 3."""

    exit_code = INTERNAL_ERROR


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
