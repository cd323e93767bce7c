"""Distribution names compared as the packaging standards compare them.

:func:`canonical_name` is PEP 503's normalisation (``re.sub(r"[-_.]+", "-", name).lower()``),
the same answer as ``packaging.utils.canonicalize_name`` without ``validate``.  The
loader calls it on every entry point it considers; ``packaging.utils`` imports
``packaging.tags`` (with ``platform``, ``subprocess`` and ``logging``), about 10 ms of a
fresh process's first resolve, for this one expression.
"""

from __future__ import annotations

import re

__all__ = ["canonical_name"]

_RUNS = re.compile(r"[-_.]+")


def canonical_name(name: str) -> str:
    """``name`` normalised by PEP 503: every run of ``-``, ``_`` and ``.`` becomes one
    ``-``, and the result is lower case.  Two distribution names mean the same
    distribution exactly when their canonical names are equal."""
    return _RUNS.sub("-", name).lower()
