"""The ``made_by`` field of a manifest record: what made its maps, compared part by part.

Every record an explain run writes says what made its maps::

    "made_by": {"model": "cnn.keras", "weights": "1f0c5a9e2b7d4c38", "maths": 1,
                "options": "9a4e0c2d6b1f7e53", "render": "c3d2a1b0e9f87654", "drawing": 1}

``model`` is the model as the run named it (a path, ``keras:NAME``...), for people: it is
not compared. ``weights`` is the model's content digest
(:mod:`guidedbp.models.digest`), ``maths`` the version of the methods' maths
(:data:`guidedbp.engine.methods.registry.MATHS_VERSION`), ``options`` a digest of every option
that changes a map, ``render`` one of every option that changes a picture of it and
``drawing`` the version of how pictures are drawn
(:data:`guidedbp.render.DRAWING_VERSION`; :mod:`guidedbp.pipeline.fingerprint` builds
them). A resumed run carries a record over
only when they all are this run's; :func:`difference` says which is not.

>>> now = {"model": "b.keras", "weights": "02", "maths": 1, "options": "aa", "render": "bb",
...        "drawing": 1}
>>> difference({**now, "model": "a.keras"}, now) is None  # the same content elsewhere
True
>>> difference({**now, "weights": "01"}, now), difference(None, now)
('model', 'unfingerprinted')
"""

from __future__ import annotations

#: The record's key.
FIELD = "made_by"

#: Why an earlier record was recomputed rather than carried over, by code: the words the
#: summary line says after "N recomputed".
REASONS = {
    "unfingerprinted": "written before fingerprints",
    "model": "made by another model",
    "maths": "made by an earlier version of the methods",
    "options": "made with other method options",
    "render": "drawn with other render options",
    "drawing": "drawn by an earlier version",
    "input": "input changed since",
    "input_unfingerprinted": "written before input fingerprints",
    "targets": "for other classes or targets",
    "outputs": "outputs missing, damaged or named otherwise",
}

#: The compared parts of ``made_by``, each with the reason a difference in it gives, in
#: the order they are compared.
PARTS = (("weights", "model"), ("maths", "maths"), ("options", "options"),
         ("render", "render"), ("drawing", "drawing"))


def difference(earlier, now: dict) -> str | None:
    """Why maps made as ``earlier`` (a record's ``made_by``) are not those of a run made as
    ``now``: a key of :data:`REASONS`, or ``None`` when every compared part is the same.

    A model without a content digest (``weights`` ``None``) is never the same model.
    """
    if not isinstance(earlier, dict) or not earlier:
        return "unfingerprinted"
    for part, reason in PARTS:
        if earlier.get(part) is None or earlier.get(part) != now.get(part):
            return reason
    return None


def key(record: dict) -> tuple | None:
    """What two records made the same way share: their compared parts (``None`` for a
    record from before fingerprints)."""
    made_by = record.get(FIELD)
    if not isinstance(made_by, dict) or not made_by:
        return None
    return tuple(made_by.get(part) for part, _ in PARTS)
