"""What the row-normalisation families share: here, the one copy of a kernel source."""

from __future__ import annotations

from flyconfigs.kernels.rmsnorm import SPEC
from flyconfigs.registry.sources.device import DeviceQuery

H200 = DeviceQuery("nvidia", "sm90", "NVIDIA H200", 132, ())


def test_every_compile_request_of_a_run_refers_to_one_copy_of_the_source() -> None:
    # The tuner holds every request it queued until the run ends (the compile queue and
    # what it took from it): a whole-grid tune makes tens of thousands of them.
    keys = [{"M": m, "N": n, "dtype": "bf16", "weight_dtype": "bf16"} for m in (1, 4096) for n in (1024, 8192)]
    requests = [SPEC.build(config, key, H200) for key in keys for config in SPEC.space(key, H200)]
    assert len(requests) > 100 and len({r.name_expression for r in requests}) == 1
    assert len({id(r.source) for r in requests}) == 1
    assert requests[0].source is SPEC.source() and SPEC.entry in requests[0].source
