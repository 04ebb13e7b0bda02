"""Griffe extension for the API reference: docstrings as Markdown can show them.

guidedbp's docstrings are Google style with reStructuredText inline markup, read by
``help()`` and doctest. Before mkdocstrings renders one, this extension

- fences each doctest run (``>>>`` lines, their ``...`` continuations and the expected
  output, up to a blank line) as a ``pycon`` code block, which Markdown would otherwise
  read as a block quote and links;
- shows a Sphinx role such as ``:class:`~guidedbp.targets.Region``` as the code span
  ``Region`` (the name as Sphinx would show it, not a link);
- splits an ``Args:`` entry of several names (``cmap, clip, size: As for plot``) into
  one entry per name, as Google style has them.
"""

from __future__ import annotations

import re

try:
    from griffe import Extension
except ImportError:  # tests/test_docs.py imports this module without griffe (docs extra)
    Extension = object

#: ``:role:`target``` or ``:role:`~dotted.target```.
ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj|const|py:\w+):`(~?)([^`]+)`")


def _role(found: re.Match) -> str:
    tilde, target = found.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target.lstrip('.')}`"


def fence_doctests(text: str) -> str:
    """``text`` with each doctest run fenced as ``pycon`` at its own indentation."""
    lines, out, index = text.split("\n"), [], 0
    while index < len(lines):
        line = lines[index]
        if not line.lstrip().startswith(">>>"):
            out.append(line)
            index += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        block = []
        while index < len(lines) and lines[index].strip():
            block.append(lines[index])
            index += 1
        if out and out[-1].strip():
            out.append("")
        out += [f"{indent}```pycon", *block, f"{indent}```"]
    return "\n".join(out)


#: A section of parameters, and an entry of it that names several.
ARGS = re.compile(r"^(\s*)(Args|Arguments|Parameters|Keyword Args|Other Parameters):\s*$")
NAMES = re.compile(r"^(\s+)(\*{0,2}\w+(?:, \*{0,2}\w+)+):(.*)$")


def split_names(text: str) -> str:
    """``text`` with each ``a, b: text`` entry of an ``Args:`` section as ``a: text`` and
    ``b: text`` (continuation lines repeated with each)."""
    lines, out, section, index = text.split("\n"), [], None, 0

    def indent(line: str) -> int:
        return len(line) - len(line.lstrip())

    while index < len(lines):
        line = lines[index]
        header = ARGS.match(line)
        if header:
            section = len(header[1])
        elif section is not None and line.strip() and indent(line) <= section:
            section = None
        entry = NAMES.match(line) if section is not None else None
        if not entry:
            out.append(line)
            index += 1
            continue
        index += 1
        more = []
        while index < len(lines) and lines[index].strip() \
                and indent(lines[index]) > len(entry[1]):
            more.append(lines[index])
            index += 1
        for name in entry[2].split(", "):
            out += [f"{entry[1]}{name}:{entry[3]}", *more]
    return "\n".join(out)


def convert(text: str) -> str:
    return ROLE.sub(_role, fence_doctests(split_names(text)))


class DocstringMarkup(Extension):
    """Rewrites each docstring as :func:`convert` says, when griffe loads its object."""

    def on_instance(self, *, obj, **_) -> None:
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value)
