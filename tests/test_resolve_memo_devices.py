"""The memo serves every form of the device argument: a second call with an equal
identity, query or spec is a memo hit (the slow path runs once), and devices that
resolve differently never share an entry."""

from __future__ import annotations

import pytest

from conftest import SiteDir
from factories import MI300X, make_artifact
from flyconfigs.registry import DeviceQuery, Resolver
from flyconfigs.schema import DeviceIdentity

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}


@pytest.fixture
def counted(site: SiteDir, monkeypatch: pytest.MonkeyPatch) -> tuple[Resolver, list[object]]:
    """A resolver whose slow path records each device it is asked for."""
    site.install("sm90", [make_artifact(key=KEY)])
    resolver = Resolver()
    slow_calls: list[object] = []
    slow = Resolver._resolve_slow

    def counting(self: Resolver, kernel: object, key: object, device: object):  # type: ignore[no-untyped-def]
        slow_calls.append(device)
        return slow(self, kernel, key, device)

    monkeypatch.setattr(Resolver, "_resolve_slow", counting)
    return resolver, slow_calls


def test_an_identity_argument_is_memoized(counted: tuple[Resolver, list[object]]) -> None:
    resolver, slow_calls = counted
    identity = make_artifact().device.identity
    first = resolver.resolve("rmsnorm", KEY, identity)
    again = resolver.resolve("rmsnorm", KEY, DeviceIdentity.model_validate(identity.model_dump()))
    assert first.source == "package" and again is first
    assert len(slow_calls) == 1


def test_a_query_argument_is_memoized_even_with_list_features(counted: tuple[Resolver, list[object]]) -> None:
    resolver, slow_calls = counted
    identity = make_artifact().device.identity
    query = DeviceQuery.of(identity)
    listed = DeviceQuery(query.vendor, query.arch, query.product, query.compute_units, list(query.features or ()))  # type: ignore[arg-type]
    first = resolver.resolve("rmsnorm", KEY, query)
    assert resolver.resolve("rmsnorm", KEY, listed) is first
    assert resolver.resolve("rmsnorm", KEY, identity) is first  # the identity resolves as its query
    assert len(slow_calls) == 1


def test_devices_that_resolve_differently_never_share_an_entry(counted: tuple[Resolver, list[object]]) -> None:
    resolver, slow_calls = counted
    h200 = make_artifact().device.identity
    mi300x = DeviceIdentity.model_validate({k: MI300X[k] for k in ("vendor", "arch", "product", "compute_units",
                                                                  "features")})
    other_cus = h200.model_copy(update={"compute_units": 114})
    served = [resolver.resolve("rmsnorm", KEY, d) for d in (h200, mi300x, other_cus)]
    assert [r.layer for r in served] == ["exact", "default", "same-arch"]
    assert len(slow_calls) == 3


def test_a_query_with_list_features_resolves_like_its_tuple_form(site: SiteDir) -> None:
    site.install("sm90", [make_artifact(key=KEY)])
    query = DeviceQuery.of(make_artifact().device.identity)
    listed = DeviceQuery(query.vendor, query.arch, query.product, query.compute_units, list(query.features or ()))  # type: ignore[arg-type]
    assert Resolver().resolve("rmsnorm", KEY, listed) == Resolver().resolve("rmsnorm", KEY, query)
