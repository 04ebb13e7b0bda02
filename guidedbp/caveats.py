"""Caveats: what makes a map less meaningful, as a short code and one sentence.

A caveat travels with the maps it concerns: in :attr:`guidedbp.Explanation.caveats`
(per image), on :class:`guidedbp.ImageExplanation`, in each manifest record
(``{"code": ..., "text": ..., "method": ...}``), as a line on panels and figures, and
as a badge in the report. The engine finds those it can see in the traced model and
the maps (:data:`NO_GUIDED_ACTIVATION`, :data:`NEGLIGIBLE_MAP`, :data:`SCORECAM_CAPPED`);
model loading finds the others (:data:`UNTRAINED_WEIGHTS`, :data:`NO_RESCALING`).

Pure Python: every room may import it (the engine too, as it imports ``errors``).

>>> caveat = no_guided_activation("guided")
>>> caveat.code, caveat.method
('no-guided-activation', 'guided')
>>> caveat.text
'guided = plain gradient: the model has no guided activation'
>>> Caveat.from_record(caveat.as_record()) == caveat
True
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "CODES",
    "NEGLIGIBLE_EFFECT",
    "NEGLIGIBLE_MAP",
    "NO_GUIDED_ACTIVATION",
    "NO_RESCALING",
    "EMPTY_REGION",
    "SCORECAM_CAPPED",
    "UNTRAINED_WEIGHTS",
    "Caveat",
    "empty_region",
    "negligible_map",
    "no_guided_activation",
    "scorecam_capped",
    "unique",
]

UNTRAINED_WEIGHTS = "untrained-weights"
NO_GUIDED_ACTIVATION = "no-guided-activation"
NO_RESCALING = "no-rescaling"
NEGLIGIBLE_MAP = "negligible-map"
SCORECAM_CAPPED = "scorecam-capped"
EMPTY_REGION = "empty-region"
#: Every caveat code, in the order they are listed.
CODES = (UNTRAINED_WEIGHTS, NO_GUIDED_ACTIVATION, NO_RESCALING, NEGLIGIBLE_MAP, SCORECAM_CAPPED,
         EMPTY_REGION)

#: A gradient map is negligible when its whole first-order effect on the class score is
#: below this: float32's resolution at 1 (2**-23), the scale of a logit that moves a
#: probability. See :func:`negligible_map`.
NEGLIGIBLE_EFFECT = 2.0**-23


@dataclass(frozen=True)
class Caveat:
    """One reason to read a map with care.

    Attributes:
        code: One of :data:`CODES`.
        text: One sentence for people.
        method: The method it concerns, or ``None`` when it concerns every map.
    """

    code: str
    text: str
    method: str | None = None

    def __post_init__(self):
        if self.code not in CODES:
            raise ValueError(f"unknown caveat code {self.code!r}; expected one of "
                             f"{', '.join(CODES)}")

    def as_record(self) -> dict:
        """The manifest's form: ``code`` and ``text``, and ``method`` when it has one."""
        record = {"code": self.code, "text": self.text}
        if self.method is not None:
            record["method"] = self.method
        return record

    @classmethod
    def from_record(cls, record: dict) -> Caveat:
        """The caveat of a manifest entry (:meth:`as_record`)."""
        return cls(record["code"], record["text"], record.get("method"))

    @property
    def line(self) -> str:
        """The text as a panel or figure shows it: named by its method unless the text
        already starts with that name."""
        if self.method is None or self.text.startswith(self.method + " "):
            return self.text
        return f"{self.method}: {self.text}"

    def concerns(self, method: str) -> bool:
        """Whether it applies to ``method``'s maps."""
        return self.method is None or self.method == method


def unique(caveats: Iterable[Caveat]) -> tuple[Caveat, ...]:
    """``caveats`` without repeats, in first-seen order."""
    return tuple(dict.fromkeys(caveats))


def no_guided_activation(method: str, guide: str = "all") -> Caveat:
    """``method`` (guided backprop, deconvnet or one built on them) computed on a model
    with no activation in its rule's scope (``guide``: ``"all"`` activations or the
    ``"relu"`` family): it equals the plain gradient (times the CAM, for guided CAMs)."""
    plain = ("plain gradient x " + method.removeprefix("guided-") if "cam" in method
             else "plain gradient")
    what = "no ReLU-family activation (--guide relu)" if guide == "relu" else \
        "no guided activation"
    return Caveat(NO_GUIDED_ACTIVATION, f"{method} = {plain}: the model has {what}", method)


def negligible_map(method: str, effect: float) -> Caveat:
    """``method``'s map moves the class score by ``effect`` at most, to first order:
    below :data:`NEGLIGIBLE_EFFECT`."""
    if effect == 0.0:
        return Caveat(NEGLIGIBLE_MAP, "negligible map: it is all zero (flat in every render)",
                      method)
    return Caveat(NEGLIGIBLE_MAP,
                  f"negligible map: all of it moves the class score by {effect:.2g}, below "
                  f"float32 resolution ({NEGLIGIBLE_EFFECT:.2g}); its picture is near-zero "
                  "values scaled up", method)


def scorecam_capped(kept: int, channels: int, method: str = "scorecam") -> Caveat:
    """Score-CAM weighted ``kept`` of the feature map's ``channels`` channels."""
    return Caveat(SCORECAM_CAPPED,
                  f"{method} used only the {kept} most active of {channels} feature channels",
                  method)


def empty_region(label: str) -> Caveat:
    """A region target (``label``: ``region:1``) with no pixel in it: its score is 0 and
    every map of it is all zero."""
    return Caveat(EMPTY_REGION, f"{label} is empty: no pixel of the output is in the "
                  "region, so its score is 0 and its maps are zero")
