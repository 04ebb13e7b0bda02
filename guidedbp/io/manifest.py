"""``manifest.jsonl``: one JSON object per input, written as the run goes."""

from __future__ import annotations

import json
import os


class ManifestWriter:
    """Appends one JSON line per record and flushes it, so a killed run keeps what it did.

    The file is started afresh for each run: it describes that run.
    """

    def __init__(self, path: str | os.PathLike):
        os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
        self.path = os.fspath(path)
        self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record, sort_keys=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()

    def __enter__(self) -> ManifestWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_manifest(path: str | os.PathLike) -> list[dict]:
    """The records of a manifest, in order."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
