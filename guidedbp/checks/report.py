"""Check results as a table, as JSON and as a JUnit XML report (no click, no numpy)."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections import Counter

from guidedbp.checks.results import FAIL, INFO, PASS, SKIP, STATUSES, CheckResult

#: The JUnit test suite's name, as CI systems show it.
SUITE_NAME = "guidedbp check"


def summary_counts(results: list[CheckResult]) -> dict[str, int]:
    counts = Counter(result.status for result in results)
    return {status: counts.get(status, 0) for status in STATUSES}


def summary_line(results: list[CheckResult], seconds: float) -> str:
    """``5 passed, 1 failed, 1 info, 0 skipped in 6.2 s``."""
    counts = summary_counts(results)
    return (f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[INFO]} info, "
            f"{counts[SKIP]} skipped in {seconds:.1f} s")


def format_table(results: list[CheckResult], width: int = 100) -> str:
    """One row per check: name, status and detail (wrapped under the detail column)."""
    import textwrap

    name_width = max([len("check")] + [len(r.name) for r in results])
    indent = name_width + 2 + 6 + 2
    detail_width = max(width - indent, 30)
    lines = [f"{'check':<{name_width}}  {'status':<6}  detail"]
    for result in results:
        # Paths (diff pictures) stay whole, to be copied from the terminal.
        wrapped = textwrap.wrap(result.detail, detail_width, break_long_words=False,
                                break_on_hyphens=False) or [""]
        lines.append(f"{result.name:<{name_width}}  {result.status:<6}  {wrapped[0]}")
        lines.extend(" " * indent + more for more in wrapped[1:])
    return "\n".join(lines)


def to_document(model: str, images: list[str], results: list[CheckResult], seconds: float,
                **extra) -> dict:
    """The ``--json`` object: model, images, checks (name/status/detail/data), summary."""
    return _json_safe({
        "model": model,
        "images": images,
        "passed": not any(result.failed for result in results),
        "summary": summary_counts(results),
        "seconds": round(seconds, 3),
        "checks": [result.as_dict() for result in results],
        **extra,
    })


def to_json(document: dict) -> str:
    """Strict JSON (NaN and infinity were already turned into null)."""
    return json.dumps(document, indent=2, allow_nan=False)


def junit_xml(model: str, results: list[CheckResult], seconds: float) -> bytes:
    """A JUnit XML report: one ``<testsuite name="guidedbp check">`` with one
    ``<testcase>`` per check; failures as ``<failure message=...>``, skips as
    ``<skipped/>``; the detail (and, for failures, the data) in the body. A failure's
    attachments (diff pictures) are linked from its ``<system-out>`` as
    ``[[ATTACHMENT|/abs/path.png]]``, the form Jenkins and GitLab show as files."""
    counts = summary_counts(results)
    attributes = {"name": SUITE_NAME, "tests": str(len(results)), "failures": str(counts[FAIL]),
                  "errors": "0", "skipped": str(counts[SKIP]), "time": f"{seconds:.3f}"}
    root = ET.Element("testsuites", attributes)
    suite = ET.SubElement(root, "testsuite", attributes)
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", {"name": "model", "value": model})
    for result in results:
        case = ET.SubElement(suite, "testcase", {
            # No model path here: CI tools split class names at dots.
            "classname": SUITE_NAME, "name": result.name,
            "time": f"{result.seconds:.3f}",
        })
        if result.status == FAIL:
            failure = ET.SubElement(case, "failure", {"message": result.detail, "type": FAIL})
            failure.text = result.detail + "\n\n" + json.dumps(
                _json_safe(result.data), indent=2, allow_nan=False)
            if result.attachments:
                ET.SubElement(case, "system-out").text = "\n".join(
                    f"[[ATTACHMENT|{path}]]" for path in result.attachments)
        elif result.status == SKIP:
            ET.SubElement(case, "skipped", {"message": result.detail})
        else:
            ET.SubElement(case, "system-out").text = f"{result.status}: {result.detail}"
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def _json_safe(value):
    """NaN and infinity as ``None``, tuples as lists, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _json_safe(value.item())
    return value
