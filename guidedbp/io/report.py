"""``OUT/index.html``: one self-contained page to browse an explain run's manifest.

The page is a single file with its style and script inline: it needs no network
and opens from ``file://``. The manifest's records go in as compact JSON inside a
``<script type="application/json">`` block, with ``<``, ``>`` and ``&`` written as
``\\u003c``, ``\\u003e`` and ``\\u0026`` (and every other non-ASCII character as a
``\\u`` escape) so that no file name can end the block; the page's script puts every
name, label and error reason on screen as text (``textContent``), never as markup.
A Content-Security-Policy allows only the page's own script and style (by hash) and
images from the page's folder, so the page makes no request beyond its thumbnails.

Rows are shown 100 to a page, thumbnails load lazily, and the view (status, class,
target, caveat, sort, name filter, page) lives in the URL's hash, so a view can be
shared or reloaded: ``index.html#status=error``, ``#class=3&sort=score-desc&page=2&q=cat``,
``#caveat=untrained-weights``, ``#target=region:circle``. A record's ``caveats`` (what
makes its maps less meaningful) show as badges with their sentences on its row.

A run that named its targets (``--target``, ``--model-output``) records each one's
``target`` and ``description``: the page shows the description (``region:circle (1,234
px)``, ``unit:2 = 0.73``) where a class run shows the class, and filters by target.

Each row's outputs wrap as a grid of thumbnails grouped by method, so any number of
methods and renders fits the window. Only PNG outputs are links; an SVG figure is shown
as an image (``<img>``: a script inside it never runs), a PDF figure is a link, and any
other file is named, not linked: a file planted in OUT under an output's name cannot run
a script through the page.

The page is deterministic: the same manifest in a folder of the same name gives the
same bytes. It carries ``<meta name="generator" content="guidedbp">``, and an existing
``index.html`` without that mark (someone else's page) is never replaced.

>>> import json, tempfile
>>> folder = tempfile.mkdtemp()
>>> with open(os.path.join(folder, "manifest.jsonl"), "w") as handle:
...     print(json.dumps({"input": "a.png", "status": "error", "error": "not an image",
...                       "targets": []}), file=handle)
>>> path = write_report(folder)
>>> os.path.basename(path), is_own_report(path)
('index.html', True)
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
import math
import os
import stat
from importlib import resources
from urllib.parse import quote

from guidedbp._text import one_line
from guidedbp.errors import GuidedbpError
from guidedbp.io import store
from guidedbp.io.manifest import read_manifest
from guidedbp.io.write import atomic_write_bytes

__all__ = ["GENERATOR_MARK", "REPORT", "ReportError", "is_own_report", "report_data",
           "report_html", "write_report"]

#: The report's file name under OUT.
REPORT = "index.html"
#: The tag that marks a page as guidedbp's own, so a later run may replace it.
GENERATOR_MARK = '<meta name="generator" content="guidedbp">'
#: Bytes of an existing page read when looking for the mark (it sits near the top).
_MARK_READ = 4096
#: The statuses a manifest record has, in the order the page lists them.
STATUSES = ("ok", "error", "skipped")


class ReportError(GuidedbpError):
    """The report cannot be written (no manifest, someone else's ``index.html``, a link in
    its place); one line."""


# -- the data --------------------------------------------------------------------------------


def _href(path: object) -> str | None:
    """A relative URL for an output path below OUT ('/'-separated), each segment
    percent-encoded (``#``, ``?``, ``%``, spaces, ``:``); ``None`` for a path that is not
    relative and inside OUT (absolute, ``..``, empty segments)."""
    if not isinstance(path, str) or not path:
        return None
    segments = path.split("/")
    if any(segment in ("", ".", "..") for segment in segments):
        return None
    try:  # a name that is not UTF-8 was read as surrogate escapes: link its real bytes
        return "/".join(quote(segment.encode("utf-8", "surrogateescape"), safe="")
                        for segment in segments)
    except UnicodeEncodeError:
        return None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past float's range
        return None
    return number if math.isfinite(number) else None


def _class(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: object) -> str | None:
    return None if value is None else value if isinstance(value, str) else str(value)


def _methods(record: dict) -> list[str]:
    method = record.get("method")
    return [name for name in method.split(",") if name] if isinstance(method, str) else []


def _targets(record: dict) -> list[dict]:
    """A record's targets; a record without a ``targets`` list has its top-level one."""
    targets = record.get("targets")
    if isinstance(targets, list):
        return [target for target in targets if isinstance(target, dict)]
    return [record] if _class(record.get("class")) is not None else []


#: The target kinds whose ``class`` is a class of the model (the class filter lists them);
#: a unit's flat index or a similarity has none.
_CLASS_KINDS = (None, "class", "region", "box", "detection")


def _target_info(target: dict) -> list | None:
    """``[spec, description, kind]`` of a target entry of a run that named its targets
    (it has ``target`` or ``description``), else ``None`` (a class run's entry)."""
    named, description = target.get("target"), _text(target.get("description"))
    if not isinstance(named, dict) and description is None:
        return None
    named = named if isinstance(named, dict) else {}
    spec = _text(named.get("spec"))
    return [spec or description, description or spec, _text(named.get("kind"))]


def _caveats(record: dict) -> list[list]:
    """A record's caveats as ``[code, sentence, method or None]``; a record written before
    caveats existed has none, and entries that are not objects are left out."""
    caveats = record.get("caveats")
    if not isinstance(caveats, list):
        return []
    return [[_text(caveat.get("code")) or "caveat", _text(caveat.get("text")) or "",
             _text(caveat.get("method"))] for caveat in caveats if isinstance(caveat, dict)]


def _column(key: str, methods: list[str]) -> str:
    """``guided.color`` for every output: one-method runs name outputs by render only."""
    if key == "figure":  # every method in one file
        return key
    return f"{methods[0]}.{key}" if len(methods) == 1 and "." not in key else key


def report_data(records: list[dict], source: str = "manifest.jsonl") -> dict:
    """The compact JSON the page reads: one list per record, no repeated keys.

    Args:
        records: Manifest records (:func:`guidedbp.io.manifest.read_manifest`).
        source: The manifest's file name, shown on the page.

    Returns:
        ``{"columns": [...], "records": [[input, status, error, [[class, label, score,
        [href per column or None]], ...], [[code, sentence, method or None], ...]], ...],
        "classes": [[class, label], ...], "targets": [[spec, records], ...],
        "summary": {...}}``. Columns are the output names (``METHOD.RENDER``, ``panel``)
        in the order they first appear; hrefs are relative URLs below OUT. The last list
        is the record's ``caveats`` (none for a record without them); the summary counts
        the records with each caveat code. A target of a run that named its targets has
        a fifth item, ``[spec, description, kind]``, and its spec is counted in
        ``targets`` (records per spec, in order of appearance; empty for class runs);
        its class is ``None`` unless it is a class or region target. A packaged sample's
        input is shown from ``guidedbp/`` on (:func:`_shown_input`), its full path sixth.

    >>> data = report_data([{"input": "a b#.png", "status": "ok", "error": None,
    ...     "method": "guided", "targets": [{"class": 3, "label": "circle", "score": 0.5,
    ...     "outputs": {"color": "a b#.png.guided.color.png"}}]}])
    >>> data["columns"]
    ['guided.color']
    >>> data["records"][0]
    ['a b#.png', 'ok', None, [[3, 'circle', 0.5, ['a%20b%23.png.guided.color.png']]], []]
    """
    columns: dict[str, int] = {}
    compact, labels, methods, specs = [], {}, {}, {}
    counts, caveat_counts = dict.fromkeys(STATUSES, 0), {}
    for record in records:
        record_methods = _methods(record)
        methods.update(dict.fromkeys(record_methods))
        status = _text(record.get("status")) or ""
        counts[status] = counts.get(status, 0) + 1
        targets = []
        for target in _targets(record):
            outputs = target.get("outputs")
            hrefs = {}
            for key, path in (outputs.items() if isinstance(outputs, dict) else ()):
                column = columns.setdefault(_column(str(key), record_methods), len(columns))
                hrefs[column] = _href(path)
            number, label = _class(target.get("class")), _text(target.get("label"))
            info = _target_info(target)
            if info is not None and info[2] not in _CLASS_KINDS:
                number = None  # a unit's index is no class
            if number is not None and (label is not None or number not in labels):
                labels[number] = labels.get(number) or label
            targets.append([number, label, _number(target.get("score")), hrefs,
                            *([info] if info is not None else [])])
        for spec in dict.fromkeys(t[4][0] for t in targets if len(t) > 4 and t[4][0]):
            specs[spec] = specs.get(spec, 0) + 1
        record_caveats = _caveats(record)
        for code in dict.fromkeys(caveat[0] for caveat in record_caveats):
            caveat_counts[code] = caveat_counts.get(code, 0) + 1
        shown, full = _shown_input(_text(record.get("input")) or "")
        compact.append([shown, status, _text(record.get("error")), targets, record_caveats,
                        *([full] if full else [])])
    for target in (target for row in compact for target in row[3]):
        target[3] = [target[3].get(index) for index in range(len(columns))]
    return {
        "columns": list(columns),
        "records": compact,
        "classes": [[number, labels[number]] for number in sorted(labels)],
        "targets": [[spec, count] for spec, count in specs.items()],
        "summary": {"inputs": len(compact), "statuses": counts, "methods": list(methods),
                    "classes": len(labels), "source": source,
                    "caveats": [[code, caveat_counts[code]] for code in sorted(caveat_counts)]},
    }


#: The installed package's folder: inputs below it are its samples.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _shown_input(path: str) -> tuple[str, str | None]:
    """``(shown, full)``: a path inside the installed package (``guidedbp demo``'s
    samples) from ``guidedbp/`` on, and its full path; any other input as it is, ``None``.

    >>> sample = os.path.join(_PACKAGE, "demo", "data", "samples", "circle_0.png")
    >>> _shown_input(sample)[0], _shown_input(sample)[1] == sample
    ('guidedbp/demo/data/samples/circle_0.png', True)
    >>> _shown_input("photos/cat.jpg")
    ('photos/cat.jpg', None)
    """
    if not path.startswith(_PACKAGE + os.sep):
        return path, None
    inside = os.path.relpath(path, os.path.dirname(_PACKAGE))
    return inside.replace(os.sep, "/"), path


def _script_json(value: object) -> str:
    """JSON that is safe inside ``<script>``: no ``<``, ``>`` or ``&`` (so no ``</script>``
    or ``<!--``) and ASCII only (so no U+2028/2029, and no unpaired surrogate to encode)."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    # These characters occur only inside JSON strings, where \\uXXXX means the same.
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# -- the page --------------------------------------------------------------------------------
# The page's template, style and script ship as files in guidedbp/io/data/ (report.html,
# report.css, report.js), read once.


@functools.lru_cache(maxsize=1)
def _assets() -> tuple[str, str, str, str]:
    """``(template, style, script, policy)``: the Content-Security-Policy lets only this
    page's own script and style run (by their hashes) and images come from its folder."""
    folder = resources.files("guidedbp.io").joinpath("data")
    template, style, script = (folder.joinpath(f"report.{kind}").read_text(encoding="utf-8")
                               for kind in ("html", "css", "js"))
    policy = (f"default-src 'none'; script-src {_digest(script)}; style-src {_digest(style)}; "
              "img-src 'self' file:; base-uri 'none'; form-action 'none'")
    return template, style, script, policy


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def report_html(records: list[dict], *, title: str | None = None,
                source: str = "manifest.jsonl") -> str:
    """The page for ``records`` (see :func:`report_data`), as text; the same records give
    the same text.

    Args:
        records: Manifest records, in order.
        title: The page's title and heading (plain text; escaped here); ``None``:
            "guidedbp report" and, added by the page itself, the name of the folder it
            is opened from.
        source: The manifest's file name, shown in the summary line.
    """
    template, style, script, policy = _assets()
    named = "folder" if title is None else "given"
    return template.format(mark=GENERATOR_MARK, policy=policy,
                           title=html.escape("guidedbp report" if title is None else title),
                           named=named, style=style, script=script,
                           data=_script_json(report_data(records, source)))


# -- the file --------------------------------------------------------------------------------


def is_own_report(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a regular file (not a link) carrying guidedbp's generator mark.

    Reads the first bytes only; a FIFO or device is not opened for reading.
    """
    if store.is_url(os.fspath(path)):
        try:
            return GENERATOR_MARK.encode() in (store.read_range(os.fspath(path), 0, _MARK_READ)
                                               or b"")
        except OSError:
            return False
    try:
        descriptor = os.open(os.fspath(path), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                             | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return False
        return GENERATOR_MARK.encode() in os.read(descriptor, _MARK_READ)
    except OSError:
        return False
    finally:
        os.close(descriptor)


def _check_target(path: str) -> None:
    """Refuse to replace a link, a folder or FIFO, or a page someone else wrote."""
    if store.is_url(path):
        try:
            present = store.exists(path)
        except OSError as error:
            raise ReportError(f"{path}: cannot check it ({store.describe(error)})") from None
        if present and not is_own_report(path):
            raise ReportError(f"{path} was not written by guidedbp (no generator mark): "
                              "refusing to replace it; move it away to get a report")
        return
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as error:
        raise ReportError(f"{path}: cannot check it ({one_line(error.strerror or error)})") \
            from None
    if stat.S_ISLNK(mode):
        raise ReportError(f"{path} is a symbolic link: refusing to write through it")
    if not stat.S_ISREG(mode):
        raise ReportError(f"{path} is not a regular file: refusing to replace it")
    if not is_own_report(path):
        raise ReportError(f"{path} was not written by guidedbp (no generator mark): "
                          "refusing to replace it; move it away to get a report")


def _read_records(output: str, manifest: str) -> list[dict]:
    if os.path.basename(manifest) != manifest or manifest in ("", ".", ".."):
        raise ReportError(f"manifest={manifest!r}: expected a file name inside {output}")
    if store.is_url(output):
        path = store.join(output, manifest)
        try:
            return read_manifest(path)
        except FileNotFoundError:
            missing = store.missing_bucket(output)
            raise ReportError(f"{output}: {missing}" if missing is not None else
                              f"{path}: no manifest to report on (an explain run writes "
                              "one)") from None
        except OSError as error:
            raise ReportError(f"{path}: cannot read it ({store.describe(error)})") from None
        except (ValueError, RecursionError) as error:
            raise ReportError(f"{path}: not a manifest ({one_line(error, 160)})") from None
    path = os.path.join(output, manifest)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ReportError(f"{path}: no manifest to report on (an explain run writes one)") \
            from None
    except OSError as error:
        raise ReportError(f"{path}: cannot read it ({one_line(error.strerror or error)})") \
            from None
    if not stat.S_ISREG(mode):  # a FIFO would block the read
        raise ReportError(f"{path} is not a regular file, expected a manifest")
    try:
        return read_manifest(path)
    except OSError as error:
        raise ReportError(f"{path}: cannot read it ({one_line(error.strerror or error)})") \
            from None
    except (ValueError, RecursionError) as error:  # a line that is not a JSON object
        raise ReportError(f"{path}: not a manifest ({one_line(error, 160)})") from None


def write_report(output: str | os.PathLike, manifest: str = "manifest.jsonl", *,
                 title: str | None = None) -> str:
    """Write ``OUT/index.html``, a page to browse the records of ``OUT/<manifest>``.

    The page is written atomically (a temporary file renamed into place) and only
    ever at ``OUT/index.html``; a page that already holds these very bytes is left as it
    is (its modification time too).

    Args:
        output: The run's output folder, OUT.
        manifest: The manifest's file name inside OUT.
        title: The page's title; default ``"guidedbp report: <its folder's name>"`` (the
            page reads the name from its own address, so the bytes do not depend on it).

    Returns:
        The page's path, ``os.path.join(output, "index.html")``.

    Raises:
        ReportError: OUT is not a folder; the manifest is missing, not a regular file or
            not JSON lines; ``index.html`` is a symbolic link, not a regular file, or a
            file guidedbp did not write (left untouched); or the page cannot be written.
    """
    output = os.fspath(output)
    if not store.is_url(output) and not os.path.isdir(output):
        raise ReportError(f"{output} is not a folder")
    records = _read_records(output, manifest)
    target = store.join(output, REPORT) if store.is_url(output) else \
        os.path.join(output, REPORT)
    _check_target(target)
    if title is not None:  # a name that is not UTF-8 (surrogate escapes) shows U+FFFD
        title = title.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    page = report_html(records, title=title, source=manifest).encode("utf-8")
    if _same_bytes(target, page):  # a resumed run with nothing new leaves it untouched
        return target
    try:
        atomic_write_bytes(target, page)
    except OSError as error:
        raise ReportError(f"{target}: cannot write it ({one_line(error.strerror or error)})") \
            from None
    return target


def _same_bytes(path: str, data: bytes) -> bool:
    """Whether the regular file ``path`` (checked already) holds exactly ``data``."""
    if store.is_url(path):
        try:
            return store.size_of(path) == len(data) and store.read_bytes(path) == data
        except OSError:
            return False
    try:
        if os.path.getsize(path) != len(data):
            return False
        with open(path, "rb") as handle:
            return handle.read() == data
    except OSError:
        return False
