"""The sections of ``make bench``, one module each, in the order a whole run runs them.

Each module has a docstring (what it measures, on what), ``NAME`` (as ``--only`` takes
it) and ``run(folder, args)``; the shared helpers are :mod:`sections.common`'s.
"""

from sections import (
    blackbox,
    callback,
    costs,
    detection,
    drise,
    end_to_end,
    engine,
    fingerprint,
    many_targets,
    memory,
    memory_big,
    methods,
    precision,
    ray,
    report,
    s3,
    savedmodel,
    startup,
    targets,
)

#: Every section, in the order ``make bench`` runs them.
SECTIONS = (engine, savedmodel, methods, end_to_end, memory, memory_big, targets, detection,
            many_targets, costs, blackbox, drise, callback, report, ray, s3, precision,
            startup, fingerprint)
