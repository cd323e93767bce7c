"""The matching rules as pure functions: exact keys, the nearest key on ordinal axes
only (log2 distance, a tie to the larger tuned value), the order other products are
tried in, collisions by rank."""

from __future__ import annotations

from factories import H200, MI300X, make_artifact
from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.registry.core.problems import ProblemLog
from flyconfigs.registry.search.collisions import find_collisions
from flyconfigs.registry.search.matching import by_product, exact_matches, nearest_matches
from flyconfigs.registry.sources.entries import Entry, Source

KEY = {"M": 4096, "N": 8192, "dtype": "bf16", "weight_dtype": "bf16"}


def _entry(rank: int, **key: object) -> Entry:
    artifact = make_artifact(device=MI300X, key={**KEY, **key})
    return Entry("rmsnorm", dict(artifact.key), artifact.device.identity, f"/x/{rank}-{artifact.file_name()}",
                 Source("override", f"/x/{rank}", (0, rank)), _artifact=artifact)


def test_nearest_is_by_log2_distance_on_ordinal_axes_and_a_tie_goes_to_the_larger() -> None:
    pool = [_entry(0, M=1024), _entry(0, M=16384), _entry(0, M=8192), _entry(0, M=4096, N=4096)]
    ordered = [e.key["M"] for e in nearest_matches(pool, dict(KEY), SPEC)]
    # M and N are both ordinal: M=8192 and (M=4096, N=4096) are one step away each, the
    # tie going to the larger tuned values; M=16384 and M=1024 two steps.
    assert ordered == [8192, 4096, 16384, 1024]
    assert nearest_matches([_entry(0, M=2048), _entry(0, M=8192)], dict(KEY), SPEC)[0].key["M"] == 8192
    assert exact_matches(pool, {**KEY, "M": 1024}) == [pool[0]]


def test_collisions_name_the_winner_by_rank() -> None:
    first, second = _entry(0), _entry(1)
    (collision,) = find_collisions([second, first], ProblemLog())
    assert collision.winner.startswith("/x/0-") and collision.shadowed[0].startswith("/x/1-")
    assert collision.expected, "an override directory winning is a choice"


def _product_entry(product: str, rank: int = 0, **key: object) -> Entry:
    device = {**H200, "product": product}
    artifact = make_artifact(device=device, key={**KEY, **key})
    return Entry("rmsnorm", dict(artifact.key), artifact.device.identity, f"/x/{rank}-{product}-{artifact.file_name()}",
                 Source("override", f"/x/{rank}", (0, rank)), _artifact=artifact)


def test_other_products_are_tried_nearest_name_first_within_each_source() -> None:
    h200, h100 = _product_entry("NVIDIA H200"), _product_entry("NVIDIA H100 80GB HBM3")
    # Whatever order the files come in, one device gets one product's artifacts.
    for pool in ([h200, h100], [h100, h200]):
        assert [e.device.product for e in by_product(pool, "NVIDIA H100 NVL")] == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
        assert [e.device.product for e in by_product(pool, "NVIDIA H200 NVL")] == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]
        # No name nearer than the other: by name, the same for every key.
        assert by_product(pool, "NVIDIA GH200 480GB")[0] is h100
        assert by_product(pool, None)[0] is h100
    # A source that ranks first still goes first, whatever its product.
    elsewhere = _product_entry("NVIDIA H200", rank=0)
    near_but_later = _product_entry("NVIDIA H100 80GB HBM3", rank=1)
    assert by_product([near_but_later, elsewhere], "NVIDIA H100 NVL") == [elsewhere, near_but_later]
