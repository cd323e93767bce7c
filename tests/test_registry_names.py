"""Distribution names compare as pip compares them (PEP 503), without importing
``packaging.utils`` on the loader path."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from packaging.utils import canonicalize_name

from flyconfigs.registry.core.names import canonical_name

_NAME_CHARS = "aAzZ09-_.İßé~ "
# Any character but surrogates, with no codec: text()'s default asks for UTF-8 round trips,
# whose check warns (an error under the suite's filters) on some fresh hypothesis caches.
_ANY_CHAR = st.characters(exclude_categories=("Cs",))


@given(st.text(alphabet=_NAME_CHARS, max_size=24) | st.text(_ANY_CHAR, max_size=24))
def test_canonical_name_is_packaging_canonicalize_name(name: str) -> None:
    assert canonical_name(name) == canonicalize_name(name)


def test_canonical_name_folds_runs_of_separators_and_case() -> None:
    assert canonical_name("Flyconfigs__Data.-SM90") == "flyconfigs-data-sm90"
    assert canonical_name("flyconfigs_sm90") == canonical_name("FLYCONFIGS.SM90") == "flyconfigs-sm90"
    assert canonical_name("flyconfigs-sm90") != canonical_name("flyconfigs-sm900")
