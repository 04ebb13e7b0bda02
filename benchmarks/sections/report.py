"""report: writing ``OUT/index.html`` from a manifest of 10,000 records.
"""

from __future__ import annotations

import os

from sections.common import timed

#: The section's name, as ``--only`` takes it.
NAME = "report"


#: Seconds the report of 10,000 records may take to write.
REPORT_TARGET = 5.0


def report_time(folder: str, count: int = 10_000) -> None:
    import json

    from guidedbp.io.report import write_report

    output = os.path.join(folder, "report")
    os.makedirs(output)
    methods = ("guided", "gradcam")
    with open(os.path.join(output, "manifest.jsonl"), "w", encoding="utf-8") as manifest:
        for index in range(count):
            name = f"photos/{index // 100:03d}/image-{index:05d}.jpg"
            failed = index % 50 == 7
            outputs = {} if failed else {f"{m}.{r}": f"{name}.{m}.{r}.png"
                                         for m in methods for r in ("color", "overlay")}
            target = {"class": index % 1000, "label": f"class {index % 1000}",
                      "score": round((index * 7919 % 10007) / 10007, 6), "outputs": outputs,
                      "raw": None}
            manifest.write(json.dumps({
                "input": name, "status": "error" if failed else "ok",
                "error": "cannot identify image file" if failed else None,
                **({k: None for k in ("class", "label", "score")} if failed else
                   {k: target[k] for k in ("class", "label", "score")}),
                "method": ",".join(methods), "outputs": outputs, "raw": None,
                "targets": [] if failed else [target]}) + "\n")
    seconds = timed(write_report, output)
    size = os.path.getsize(os.path.join(output, "index.html"))
    verdict = "met" if seconds < REPORT_TARGET else "NOT met"
    print(f"report of {count:,} manifest records: {seconds:.2f} s, index.html "
          f"{size / 2**20:.1f} MiB (target < {REPORT_TARGET:.0f} s {verdict})")



def run(folder: str, args) -> None:
    """Run the section (``folder``: the run's scratch folder; ``args``: the
    runner's options)."""
    report_time(folder)
