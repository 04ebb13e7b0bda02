"""What a check returns: a name, a status, one line of detail and JSON-ready data."""

from __future__ import annotations

from dataclasses import dataclass, field

PASS, FAIL, INFO, SKIP = "pass", "fail", "info", "skip"
#: Every status; only ``fail`` makes ``guidedbp check`` exit 1.
STATUSES = (PASS, FAIL, INFO, SKIP)


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check.

    Attributes:
        name: The check's name (``finite``, ``self-test``, ...).
        status: ``pass``, ``fail``, ``info`` (measured, not a gate) or ``skip``
            (does not apply to this model or these images; ``detail`` says why).
        detail: One line for people.
        data: The measurements behind ``detail``: JSON-ready values.
        seconds: Wall time the check took.
        attachments: Files that show the outcome (the diff pictures of drifted maps):
            a JUnit XML report links them (``[[ATTACHMENT|path]]``).
    """

    name: str
    status: str
    detail: str
    data: dict = field(default_factory=dict)
    seconds: float = 0.0
    attachments: tuple[str, ...] = ()

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r} is not one of {', '.join(STATUSES)}")

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def as_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "detail": self.detail,
                "data": self.data, "seconds": round(self.seconds, 3)}


def listed(names: list[str], limit: int = 8) -> str:
    """``a, b, c`` or ``a, b, ... and 12 more``: image lists that fit on one line."""
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"
