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
sort, name filter, page) lives in the URL's hash, so a view can be shared or
reloaded: ``index.html#status=error``, ``#class=3&sort=score-desc&page=2&q=cat``.

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
import hashlib
import html
import json
import math
import os
import stat
from urllib.parse import quote

from guidedbp._text import one_line
from guidedbp.errors import GuidedbpError
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


def _column(key: str, methods: list[str]) -> str:
    """``guided.color`` for every output: one-method runs name outputs by render only."""
    return f"{methods[0]}.{key}" if len(methods) == 1 and "." not in key else key


def report_data(records: list[dict], source: str = "manifest.jsonl") -> dict:
    """The compact JSON the page reads: one list per record, no repeated keys.

    Args:
        records: Manifest records (:func:`guidedbp.io.manifest.read_manifest`).
        source: The manifest's file name, shown on the page.

    Returns:
        ``{"columns": [...], "records": [[input, status, error, [[class, label, score,
        [href per column or None]], ...]], ...], "classes": [[class, label], ...],
        "summary": {...}}``. Columns are the output names (``METHOD.RENDER``, ``panel``)
        in the order they first appear; hrefs are relative URLs below OUT.

    >>> data = report_data([{"input": "a b#.png", "status": "ok", "error": None,
    ...     "method": "guided", "targets": [{"class": 3, "label": "circle", "score": 0.5,
    ...     "outputs": {"color": "a b#.png.guided.color.png"}}]}])
    >>> data["columns"]
    ['guided.color']
    >>> data["records"][0]
    ['a b#.png', 'ok', None, [[3, 'circle', 0.5, ['a%20b%23.png.guided.color.png']]]]
    """
    columns: dict[str, int] = {}
    compact, labels, methods = [], {}, {}
    counts = dict.fromkeys(STATUSES, 0)
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
            if number is not None and (label is not None or number not in labels):
                labels[number] = labels.get(number) or label
            targets.append([number, label, _number(target.get("score")), hrefs])
        compact.append([_text(record.get("input")) or "", status,
                        _text(record.get("error")), targets])
    for target in (target for row in compact for target in row[3]):
        target[3] = [target[3].get(index) for index in range(len(columns))]
    return {
        "columns": list(columns),
        "records": compact,
        "classes": [[number, labels[number]] for number in sorted(labels)],
        "summary": {"inputs": len(compact), "statuses": counts, "methods": list(methods),
                    "classes": len(labels), "source": source},
    }


def _script_json(value: object) -> str:
    """JSON that is safe inside ``<script>``: no ``<``, ``>`` or ``&`` (so no ``</script>``
    or ``<!--``) and ASCII only (so no U+2028/2029, and no unpaired surrogate to encode)."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    # These characters occur only inside JSON strings, where \\uXXXX means the same.
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# -- the page --------------------------------------------------------------------------------

_STYLE = """
:root { color-scheme: light dark; --fg: #1d2330; --muted: #667085; --line: #e3e6ec;
  --bg: #ffffff; --zebra: #f6f7fa; --head: #eef1f6; --accent: #2f6fde; --ok: #1a7f4b;
  --error: #c0352b; --skipped: #8a6d00; --match: #fff6d6; }
@media (prefers-color-scheme: dark) { :root { --fg: #e4e7ee; --muted: #98a2b3;
  --line: #2c323d; --bg: #161a21; --zebra: #1c212a; --head: #232936; --accent: #7aa7ff;
  --ok: #4cc38a; --error: #ff7b72; --skipped: #e3b341; --match: #2e2b1f; } }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
  sans-serif; }
header { padding: 16px 24px 8px; border-bottom: 1px solid var(--line); }
h1 { margin: 0 0 4px; font-size: 20px; font-weight: 600; }
#summary { margin: 0 0 12px; color: var(--muted); }
#summary a { color: inherit; font-weight: 600; text-decoration: none;
  border-bottom: 1px dotted currentColor; }
#summary .ok { color: var(--ok); } #summary .error { color: var(--error); }
#summary .skipped { color: var(--skipped); }
#summary a.zero { color: var(--muted); font-weight: normal; }
.controls { display: flex; flex-wrap: wrap; gap: 8px 16px; align-items: center; }
.controls label { display: flex; gap: 6px; align-items: center; color: var(--muted); }
select, input[type=search], button { font: inherit; color: var(--fg); background: var(--bg);
  border: 1px solid var(--line); border-radius: 6px; padding: 4px 8px; }
input[type=search] { width: 16em; }
button { cursor: pointer; } button:disabled { cursor: default; opacity: 0.4; }
.pager { display: flex; gap: 8px; align-items: center; padding: 8px 24px; }
.pager .count { color: var(--muted); margin-left: 8px; font-variant-numeric: tabular-nums; }
main { padding: 0 24px 8px; }
table { border-collapse: separate; border-spacing: 0; min-width: 50%; }
th { position: sticky; top: 0; z-index: 1; background: var(--head); text-align: left;
  font-weight: 600; padding: 6px 10px; border-bottom: 1px solid var(--line);
  white-space: nowrap; }
td { padding: 6px 10px; vertical-align: middle; border-bottom: 1px solid var(--line); }
tbody.record:nth-of-type(even) td { background: var(--zebra); }
tbody.record tr:not(:last-child) td { border-bottom: 1px dashed var(--line); }
tbody.record td.num, tbody.record td.input, tbody.record td.status {
  border-bottom: 1px solid var(--line); }
tr.match td.class, tr.match td.score { background: var(--match); }
td.num { color: var(--muted); text-align: right; font-variant-numeric: tabular-nums;
  width: 1%; }
td.input { max-width: 28em; overflow-wrap: anywhere;
  font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 13px; }
td.input .reason, td.reason { color: var(--error); font-family: inherit; }
td.reason { font-style: italic; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 999px; font-size: 12px;
  font-weight: 600; border: 1px solid currentColor; }
.badge.ok { color: var(--ok); } .badge.error { color: var(--error); }
.badge.skipped { color: var(--skipped); } .badge.other { color: var(--muted); }
td.class .index { color: var(--muted); margin-left: 4px; font-size: 12px; }
td.score { font-variant-numeric: tabular-nums; white-space: nowrap; }
.bar { display: block; width: 64px; height: 4px; margin-top: 3px; border-radius: 2px;
  background: var(--line); overflow: hidden; }
.bar span { display: block; height: 100%; background: var(--accent); }
td.thumb { width: 1%; padding: 4px 6px; }
td.thumb a { display: flex; width: 128px; height: 128px; align-items: center;
  justify-content: center; border-radius: 4px; outline-offset: 2px; }
td.thumb.wide a { width: 256px; }
td.thumb img { display: block; width: 100%; height: 100%; object-fit: contain; }
td.thumb a:hover img { box-shadow: 0 0 0 2px var(--accent); }
td.thumb a.missing { border: 1px dashed var(--line); color: var(--muted); font-size: 12px; }
td.thumb a.missing::after { content: "missing"; }
td.empty { text-align: center; color: var(--muted); padding: 32px; }
.noscript { margin: 24px; color: var(--error); }
"""

_SCRIPT = r"""
(function () {
  "use strict";
  var PAGE_SIZE = 100;
  var STATUSES = ["all", "ok", "error", "skipped"];
  var SORTS = [["", "manifest order"], ["score-desc", "score, highest first"],
               ["score-asc", "score, lowest first"], ["name", "input name"]];
  var data = JSON.parse(document.getElementById("records").textContent);
  var records = data.records, columns = data.columns, summary = data.summary;
  var byId = function (id) { return document.getElementById(id); };
  var statusFilter = byId("status-filter"), classFilter = byId("class-filter");
  var sortSelect = byId("sort"), search = byId("search"), table = byId("rows");
  var collator = new Intl.Collator(undefined, {numeric: true, sensitivity: "base"});
  var knownClasses = {}, lowerNames = null, cache = {key: null, list: null};

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }
  function thousands(n) { return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ","); }
  function option(select, value, text) {
    var node = el("option", null, text);
    node.value = value;
    select.appendChild(node);
  }
  function classTitle(number, label) {
    return label === null ? "class " + number : label + " (" + number + ")";
  }

  // -- the fixed parts: summary, control choices, table head
  function setUp() {
    var counts = summary.statuses, line = byId("summary");
    line.appendChild(el("strong", null, thousands(summary.inputs) +
                        (summary.inputs === 1 ? " input" : " inputs")));
    line.appendChild(document.createTextNode(": "));
    [["ok", "ok"], ["error", "failed"], ["skipped", "skipped"]].forEach(function (pair, i) {
      if (i) line.appendChild(document.createTextNode(", "));
      var count = counts[pair[0]] || 0;
      var link = el("a", pair[0] + (count ? "" : " zero"), thousands(count) + " " + pair[1]);
      link.href = "#status=" + pair[0];
      line.appendChild(link);
    });
    var rest = [];
    if (summary.methods.length) rest.push("methods " + summary.methods.join(", "));
    rest.push(thousands(summary.classes) + (summary.classes === 1 ? " class" : " classes"));
    rest.push("from " + summary.source);
    line.appendChild(document.createTextNode(" \u00b7 " + rest.join(" \u00b7 ")));

    STATUSES.forEach(function (status) {
      var count = status === "all" ? summary.inputs : (counts[status] || 0);
      option(statusFilter, status, status + " (" + thousands(count) + ")");
    });
    option(classFilter, "", "all classes");
    data.classes.forEach(function (pair) {
      knownClasses[String(pair[0])] = true;
      option(classFilter, String(pair[0]), classTitle(pair[0], pair[1]));
    });
    SORTS.forEach(function (pair) { option(sortSelect, pair[0], pair[1]); });

    var head = el("thead"), row = el("tr");
    ["#", "input", "status", "class", "score"].concat(columns).forEach(function (name) {
      row.appendChild(el("th", null, name));
    });
    head.appendChild(row);
    table.appendChild(head);
  }

  // -- the view in the URL hash
  function readState() {
    var params = new URLSearchParams(location.hash.replace(/^#/, ""));
    var state = {status: params.get("status") || "all", cls: params.get("class") || "",
                 sort: params.get("sort") || "", q: params.get("q") || "",
                 page: parseInt(params.get("page") || "1", 10)};
    if (STATUSES.indexOf(state.status) < 0) state.status = "all";
    if (!SORTS.some(function (pair) { return pair[0] === state.sort; })) state.sort = "";
    if (!Object.prototype.hasOwnProperty.call(knownClasses, state.cls)) state.cls = "";
    if (!(state.page >= 1)) state.page = 1;
    return state;
  }
  function hashOf(state) {
    var params = new URLSearchParams();
    if (state.status !== "all") params.set("status", state.status);
    if (state.cls !== "") params.set("class", state.cls);
    if (state.sort) params.set("sort", state.sort);
    if (state.q) params.set("q", state.q);
    if (state.page > 1) params.set("page", String(state.page));
    return params.toString();
  }
  // Change the view: a new history entry (fires hashchange), or, while typing, in place.
  function go(change, inPlace) {
    var state = readState();
    Object.keys(change).forEach(function (key) { state[key] = change[key]; });
    if (!("page" in change)) state.page = 1;
    var hash = hashOf(state);
    if (hash === location.hash.replace(/^#/, "")) { render(); return; }
    if (inPlace) {
      try {
        history.replaceState(null, "", location.href.split("#")[0] + (hash ? "#" + hash : ""));
        render();
        return;
      } catch (error) { /* a browser that refuses it for file: pages: push instead */ }
    }
    location.hash = hash;
  }

  // -- which records, in which order
  function targetOf(record, cls) {
    var targets = record[3];
    for (var i = 0; i < targets.length; i++) if (targets[i][0] === cls) return targets[i];
    return null;
  }
  function scoreOf(record, cls) {
    var target = cls === null ? record[3][0] : targetOf(record, cls);
    return target && target[2] !== null ? target[2] : null;
  }
  function matching(state) {
    var key = [state.status, state.cls, state.sort, state.q].join("\u0000");
    if (cache.key === key) return cache.list;
    var cls = state.cls === "" ? null : Number(state.cls), q = state.q.toLowerCase();
    if (q && !lowerNames) lowerNames = records.map(function (r) { return r[0].toLowerCase(); });
    var list = [];
    for (var i = 0; i < records.length; i++) {
      var record = records[i];
      if (state.status !== "all" && record[1] !== state.status) continue;
      if (cls !== null && !targetOf(record, cls)) continue;
      if (q && lowerNames[i].indexOf(q) < 0) continue;
      list.push(i);
    }
    if (state.sort === "name") {
      list.sort(function (a, b) {
        return collator.compare(records[a][0], records[b][0]) || a - b;
      });
    } else if (state.sort) {
      var sign = state.sort === "score-desc" ? -1 : 1, scores = {};
      list.forEach(function (i) { scores[i] = scoreOf(records[i], cls); });
      list.sort(function (a, b) {  // records without a score go last either way
        if (scores[a] === null || scores[b] === null) {
          return (scores[a] === null) - (scores[b] === null) || a - b;
        }
        return sign * (scores[a] - scores[b]) || a - b;
      });
    }
    cache = {key: key, list: list};
    return list;
  }

  // -- drawing
  function thumbnail(href, column) {
    var cell = el("td", "thumb" + (column === "panel" || /\.panel$/.test(column) ? " wide" : ""));
    if (!href) return cell;
    var link = el("a"), image = el("img");
    link.href = href;
    link.title = column;
    image.loading = "lazy";  // before src, or the browser starts loading at once
    image.decoding = "async";
    image.alt = column;
    image.addEventListener("error", function () {
      link.classList.add("missing");
      image.remove();
    });
    image.src = href;
    link.appendChild(image);
    cell.appendChild(link);
    return cell;
  }
  function targetCells(row, target) {
    var cell = el("td", "class");
    cell.appendChild(el("span", "label", target[1] === null ? "class " + target[0] : target[1]));
    if (target[1] !== null) cell.appendChild(el("span", "index", "#" + target[0]));
    row.appendChild(cell);
    cell = el("td", "score");
    if (target[2] !== null) {
      var score = target[2], text = score === 0 || score >= 0.01 ? score.toFixed(3)
          : score.toExponential(1);
      cell.appendChild(document.createTextNode(text));
      cell.title = String(target[2]);
      var bar = el("span", "bar"), fill = el("span");
      fill.style.width = Math.max(0, Math.min(100, target[2] * 100)) + "%";
      bar.appendChild(fill);
      cell.appendChild(bar);
    }
    row.appendChild(cell);
    for (var c = 0; c < columns.length; c++) row.appendChild(thumbnail(target[3][c], columns[c]));
  }
  function recordRows(index, cls) {
    var record = records[index], targets = record[3], body = el("tbody", "record");
    var first = el("tr", "row"), span = Math.max(targets.length, 1);
    var shown = cls === null ? targets[0] : targetOf(record, cls);
    first.dataset.index = String(index + 1);
    first.dataset.status = record[1];
    first.dataset.class = shown ? String(shown[0]) : "";
    first.dataset.score = shown && shown[2] !== null ? String(shown[2]) : "";
    first.dataset.classes = targets.map(function (t) { return t[0]; }).join(" ");
    var number = el("td", "num", thousands(index + 1)), name = el("td", "input");
    var status = el("td", "status");
    number.rowSpan = name.rowSpan = status.rowSpan = span;
    name.appendChild(el("span", "name", record[0]));
    if (record[2] !== null && targets.length) name.appendChild(el("div", "reason", record[2]));
    var known = ["ok", "error", "skipped"].indexOf(record[1]) >= 0;
    status.appendChild(el("span", "badge " + (known ? record[1] : "other"), record[1]));
    first.appendChild(number);
    first.appendChild(name);
    first.appendChild(status);
    body.appendChild(first);
    if (!targets.length) {
      var reason = el("td", "reason", record[2] === null ? "no maps" : record[2]);
      reason.colSpan = 2 + columns.length;
      first.appendChild(reason);
      return body;
    }
    targets.forEach(function (target, k) {
      var row = k ? el("tr", "target") : first;
      if (cls !== null && targets.length > 1 && target[0] === cls) row.classList.add("match");
      targetCells(row, target);
      if (k) body.appendChild(row);
    });
    return body;
  }
  function drawPager(pager, page, pages, from, to, total) {
    pager.textContent = "";
    [["first", "\u00ab first", 1], ["previous", "\u2039 previous", page - 1],
     ["next", "next \u203a", page + 1], ["last", "last \u00bb", pages]].forEach(function (b) {
      var button = el("button", b[0], b[1]);
      button.type = "button";
      button.disabled = b[2] < 1 || b[2] > pages || b[2] === page;
      button.addEventListener("click", function () { go({page: b[2]}); });
      pager.appendChild(button);
      if (b[0] === "previous") pager.appendChild(el("span", "page", "page " +
          thousands(page) + " of " + thousands(pages)));
    });
    var count = total ? "rows " + thousands(from) + "\u2013" + thousands(to) + " of " +
        thousands(total) : "no rows";
    if (total !== records.length) count += " (" + thousands(records.length) + " in all)";
    pager.appendChild(el("span", "count", count));
  }
  function render() {
    var state = readState(), list = matching(state);
    var cls = state.cls === "" ? null : Number(state.cls);
    var pages = Math.max(1, Math.ceil(list.length / PAGE_SIZE));
    var page = Math.min(state.page, pages), start = (page - 1) * PAGE_SIZE;
    var shown = list.slice(start, start + PAGE_SIZE);
    statusFilter.value = state.status;
    classFilter.value = state.cls;
    sortSelect.value = state.sort;
    if (search.value !== state.q && document.activeElement !== search) search.value = state.q;
    Array.prototype.slice.call(table.tBodies).forEach(function (b) { b.remove(); });
    var fragment = document.createDocumentFragment();
    shown.forEach(function (index) { fragment.appendChild(recordRows(index, cls)); });
    if (!shown.length) {
      var body = el("tbody"), row = el("tr"), cell = el("td", "empty",
          records.length ? "No inputs match this view." : "The manifest has no records.");
      cell.colSpan = 5 + columns.length;
      row.appendChild(cell);
      body.appendChild(row);
      fragment.appendChild(body);
    }
    table.appendChild(fragment);
    drawPager(byId("pager"), page, pages, start + 1, start + shown.length, list.length);
    drawPager(byId("pager-bottom"), page, pages, start + 1, start + shown.length, list.length);
    document.body.dataset.ready = "true";
  }

  setUp();
  statusFilter.addEventListener("change", function () { go({status: statusFilter.value}); });
  classFilter.addEventListener("change", function () { go({cls: classFilter.value}); });
  sortSelect.addEventListener("change", function () { go({sort: sortSelect.value}); });
  search.addEventListener("input", function () { go({q: search.value}, true); });
  window.addEventListener("hashchange", render);
  render();
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
{mark}
<meta http-equiv="Content-Security-Policy" content="{policy}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<header>
<h1>{title}</h1>
<p id="summary"></p>
<noscript><p class="noscript">This report needs JavaScript to show its rows.</p></noscript>
<div class="controls">
<label>status <select id="status-filter"></select></label>
<label>class <select id="class-filter"></select></label>
<label>sort <select id="sort"></select></label>
<label>input <input id="search" type="search" placeholder="filter by name" autocomplete="off"\
></label>
</div>
</header>
<nav id="pager" class="pager" aria-label="pages"></nav>
<main><table id="rows"></table></main>
<nav id="pager-bottom" class="pager" aria-label="pages"></nav>
<script type="application/json" id="records">{data}</script>
<script>{script}</script>
</body>
</html>
"""


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


#: Only this page's own script and style run; images come from its folder; nothing else.
_POLICY = (f"default-src 'none'; script-src {_digest(_SCRIPT)}; style-src {_digest(_STYLE)}; "
           "img-src 'self' file:; base-uri 'none'; form-action 'none'")


def report_html(records: list[dict], *, title: str = "guidedbp report",
                source: str = "manifest.jsonl") -> str:
    """The page for ``records`` (see :func:`report_data`), as text; the same records give
    the same text.

    Args:
        records: Manifest records, in order.
        title: The page's title and heading (plain text; escaped here).
        source: The manifest's file name, shown in the summary line.
    """
    return _PAGE.format(mark=GENERATOR_MARK, policy=_POLICY, title=html.escape(title),
                        style=_STYLE, script=_SCRIPT,
                        data=_script_json(report_data(records, source)))


# -- the file --------------------------------------------------------------------------------


def is_own_report(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a regular file (not a link) carrying guidedbp's generator mark.

    Reads the first bytes only; a FIFO or device is not opened for reading.
    """
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
    ever at ``OUT/index.html``.

    Args:
        output: The run's output folder, OUT.
        manifest: The manifest's file name inside OUT.
        title: The page's title; default ``"guidedbp report: <OUT's folder name>"``.

    Returns:
        The page's path, ``os.path.join(output, "index.html")``.

    Raises:
        ReportError: OUT is not a folder; the manifest is missing, not a regular file or
            not JSON lines; ``index.html`` is a symbolic link, not a regular file, or a
            file guidedbp did not write (left untouched); or the page cannot be written.
    """
    output = os.fspath(output)
    if not os.path.isdir(output):
        raise ReportError(f"{output} is not a folder")
    records = _read_records(output, manifest)
    target = os.path.join(output, REPORT)
    _check_target(target)
    if title is None:
        title = f"guidedbp report: {os.path.basename(os.path.abspath(output))}"
    # A folder name that is not UTF-8 was read as surrogate escapes: show U+FFFD instead.
    title = title.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    page = report_html(records, title=title, source=manifest)
    try:
        atomic_write_bytes(target, page.encode("utf-8"))
    except OSError as error:
        raise ReportError(f"{target}: cannot write it ({one_line(error.strerror or error)})") \
            from None
    return target
