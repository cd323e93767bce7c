"""The RMSNorm family, one module a job: :mod:`.declaration` (key, tunables, validity, the
space, the launch geometry; what the registry reads), :mod:`.default` and
:mod:`.model` (the learned default and the cost model, with the tables they ship;
:mod:`.fit_default` and :mod:`.fit_model` fit those tables on measured tunings;
:mod:`.ridge` is the cost model's first version, kept to be scored beside it),
:mod:`.workload` (what the tuner times), :mod:`.op` (the op users call) and
``rmsnorm.cu`` (the one source for hipRTC and NVRTC).

Importing this package imports the declaration only: neither torch nor a GPU runtime.
"""

from __future__ import annotations

from flyconfigs.kernels.rmsnorm.declaration import (
    DTYPES,
    ELEMENT_BYTES,
    PERF_GRID,
    SPEC,
    TUNABLES,
    RMSNormSpec,
    cache_hints_of,
    cluster_of,
    hints_of,
    max_cluster_of,
    reference_rms_norm,
    traffic_bytes,
)

__all__ = ["DTYPES", "ELEMENT_BYTES", "PERF_GRID", "SPEC", "TUNABLES", "RMSNormSpec", "cache_hints_of", "cluster_of",
           "hints_of", "max_cluster_of", "reference_rms_norm", "traffic_bytes"]
