"""Flags shared by several commands, defined once.

Defaults and choices come from the library's option dataclasses
(:class:`~guidedbp.pipeline.options.RunOptions` and its groups): :func:`field_option`
reads them, so a flag cannot drift from the keyword it sets. The error policy is
:mod:`guidedbp.cli.exits`'s.
"""

from __future__ import annotations

import dataclasses

import click

from guidedbp._numbers import whole_number
from guidedbp._text import did_you_mean
from guidedbp.cli.numbers import Number, Whole
from guidedbp.engine.methods.registry import METHODS, as_methods
from guidedbp.engine.options import MAX_BATCH_SIZE, MethodOptions
from guidedbp.io.store import is_url
from guidedbp.models.preprocess import PREPROCESS_MODES
from guidedbp.models.resizing import RESIZE_MODES
from guidedbp.pipeline.options import MAX_SIDE, RunOptions


class FolderOrURL(click.Path):
    """A folder, checked as :class:`click.Path` checks it, or an object-store URL
    (``s3://bucket/prefix/``), passed on as it is: the store answers when the run starts."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and is_url(value):
            return value
        return super().convert(value, param, ctx)


_DEFAULTS = RunOptions().flat()


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
