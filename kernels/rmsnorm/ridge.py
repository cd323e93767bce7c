"""RMSNorm's cost model version 1, ``rmsnorm-ridge``: a ridge regression over the
features of a compiled config, kept to score it beside its successor
(:class:`~flyconfigs.kernels.rmsnorm.model.RMSNormCostModel`) in ``bench/cross_device.py``.

The target is the log of a candidate's time over the best candidate of its key; the
features are the config's shape, its compiled resources, the launch waves on the device
and the roofline estimate (:data:`~flyconfigs.kernels.rmsnorm.model.ROOFLINE`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from flyconfigs.kernels.rmsnorm.fit_model import timed
from flyconfigs.kernels.rmsnorm.model import ROOFLINE
from flyconfigs.kernels.rmsnorm.tunables import cluster_of
from flyconfigs.kernels.rownorm import ELEMENT_BYTES
from flyconfigs.schema import Artifact, Candidate
from flyconfigs.schema.models import Device, Resources

__all__ = ["KeyRows", "features", "key_rows", "pick", "solve"]


def features(config: Mapping[str, Any], key: Mapping[str, Any], device: Device, resources: Resources) -> list[float]:
    """What the ranking model sees of one compiled config: its shape (values per thread
    of the block's slice of the row, the whole row without a cluster,
    threads, a row spanning several waves, rows per block, vector width, row storage,
    the occupancy hint), its compiled resources (resident blocks per CU, occupancy,
    registers), the launch waves on ``device``, and the roofline estimate — each also
    scaled by ``log2 M`` and ``log2 N``, so that its weight can change with the key."""
    m, n = int(key["M"]), int(key["N"])
    esize = ELEMENT_BYTES[str(key["dtype"])]
    threads, rows = int(config["threads"]), int(config["rows_per_block"])
    vbytes, storage, occupancy = int(config["vector_bytes"]), str(config["row_storage"]), int(config["occupancy"])
    vec = max(1, (vbytes or esize) // esize)
    cluster = cluster_of(config)
    slice_n = -(-n // cluster)
    per_thread = -(-slice_n // (threads * vec))
    per_cu = max(1, resources.max_blocks_per_cu or 1)
    waves_exact = -(-m // rows) * cluster / (device.compute_units * per_cu)
    base = [
        math.log2(per_thread), math.log2(threads), float(threads > device.wave_size), math.log2(rows),
        float(vbytes == 0), float(vbytes == 4), float(vbytes == 8), float(storage == "smem"),
        float(storage == "reread"), float(occupancy == 2), math.log2(per_cu), resources.occupancy or 0.0,
        (resources.registers or 0) / 256, math.log2(max(waves_exact, 1e-3)), math.ceil(waves_exact) / waves_exact,
        math.log(ROOFLINE.predict_us(config, key, device, resources)),
    ]
    scale_m, scale_n = math.log2(m) / 16, math.log2(n) / 16
    return [1.0, *base, *(scale_m * f for f in base), *(scale_n * f for f in base)]



def _median(candidate: Candidate) -> float:
    assert candidate.timing is not None  # timed() keeps timed candidates only
    return candidate.timing.median_us


@dataclass(frozen=True)
class KeyRows:
    """One measured key as the fit sees it: its servable candidates, their features on a
    device and the log of each one's time over the key's best."""

    artifact: Artifact
    device: Device
    candidates: list[Candidate]
    x: torch.Tensor
    y: torch.Tensor


def key_rows(artifact: Artifact, device: Device | None = None) -> KeyRows:
    """``artifact``'s candidates with their features on ``device`` (the artifact's own by
    default: a prediction for another product passes the catalog's descriptor of it)."""
    candidates = timed(artifact)
    on = device or artifact.device
    x = torch.tensor([features(c.config, artifact.key, on, c.resources) for c in candidates],  # type: ignore[arg-type]
                     dtype=torch.float64)
    best = min(_median(c) for c in candidates)
    y = torch.tensor([math.log(_median(c) / best) for c in candidates], dtype=torch.float64)
    return KeyRows(artifact, on, candidates, x, y)


def solve(rows: Sequence[KeyRows], lam: float) -> torch.Tensor:
    """The ridge weights fitted on ``rows`` with strength ``lam`` (the intercept is not shrunk)."""
    x = torch.cat([r.x for r in rows])
    y = torch.cat([r.y for r in rows])
    eye = torch.eye(x.shape[1], dtype=x.dtype)
    eye[0, 0] = 0.0
    weights: torch.Tensor = torch.linalg.solve(x.T @ x + lam * eye, x.T @ y)
    return weights


def pick(weights: torch.Tensor, rows: KeyRows) -> Candidate:
    """The candidate of ``rows`` the weights predict fastest."""
    return rows.candidates[int(torch.argmin(rows.x @ weights))]
