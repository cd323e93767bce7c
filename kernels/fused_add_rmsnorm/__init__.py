"""The fused residual-add + RMSNorm family: :mod:`.declaration` (key, tunables, validity,
the space; what the registry reads), :mod:`.kernel` (the Triton kernel), :mod:`.workload`
(the inputs the tuner times and the launch of one config), :mod:`.impls` (which
implementation a config runs), :mod:`.op` (the op users call)
and :mod:`.reference` (what it computes).

Importing this package imports the declaration only: neither torch nor Triton.
"""

from __future__ import annotations

from flyconfigs.kernels.fused_add_rmsnorm.declaration import (
    HIDDEN_SIZE_GRID,
    SPEC,
    TUNABLES,
    FusedAddRMSNormSpec,
    reference_fused_add_rms_norm,
    traffic_bytes,
)

__all__ = ["HIDDEN_SIZE_GRID", "SPEC", "TUNABLES", "FusedAddRMSNormSpec", "reference_fused_add_rms_norm", "traffic_bytes"]
