"""Predicting without the device: plan → compile for its arch (parallel, cached) → read
each candidate's resources → rank with the kernel's cost model → emit.

For a GPU that is not here (gfx942 with hipRTC on a CPU): every candidate of the space is
compiled with the real compiler for the device's arch, its registers, LDS, scratch and
occupancy read from the code object; candidates that fail to compile are recorded with
the error and candidates that spill are recorded and not ranked; the kernel's cost model
(:class:`~flyconfigs.kernels.plugin.CostModel`) ranks the rest from the device
descriptor, the key and those resources.  The artifact says so: ``selection.rule`` is
``predicted``, candidates are ``compiled`` (never timed) with their ``predicted_us``, and
``provenance.model`` names the model.  A measured artifact replaces it wherever both
match (``flyconfigs tune`` on the device, published as a newer version).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from flyconfigs._version import __version__
from flyconfigs.errors import TuneError
from flyconfigs.kernels.plugin import CostModel, TunableKernel, cost_model, tool_versions
from flyconfigs.schema.models import (
    SCHEMA_VERSION,
    Artifact,
    Candidate,
    Choice,
    Device,
    KernelRef,
    ModelRef,
    Provenance,
    Resources,
    Selection,
)
from flyconfigs.tuner import emit
from flyconfigs.tuner.key import candidate_configs

__all__ = ["PredictReport", "Prescoring", "ResourceCompiler", "predict"]


@runtime_checkable
class Prescoring(Protocol):
    """A cost model that can rank configs before they are compiled (``--shortlist``)."""

    def prescores(self, configs: Sequence[Any], key: Any, device: Device) -> list[float]: ...


class ResourceCompiler(Protocol):
    """What the predict path needs of a toolchain (:class:`~flyconfigs.tuner.toolchain.GPUToolchain`)."""

    name: str

    def versions(self) -> dict[str, str]: ...
    def options(self) -> list[str]: ...
    def compile_resources(self, kernel: TunableKernel, key: Any, configs: list[Any], device: Device,
                          block_threads: Callable[[Any], int]) -> list[str | Resources]: ...


@dataclass
class PredictReport:
    """Every key's artifact path and candidate counts."""

    device: Device
    artifacts: list[Path] = field(default_factory=list)
    skipped: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    model: tuple[str, int] | None = None
    """The cost model's name and version."""


def predict(kernel: TunableKernel, keys: Sequence[dict[str, Any]], device: Device, out: Path,
            toolchain: ResourceCompiler, budget: int | None = None, resume: bool = False,
            progress: Callable[[str, dict[str, Any]], None] | None = None, model: CostModel | None = None,
            shortlist: int | None = None) -> PredictReport:
    """One predicted artifact per key of ``keys`` for ``device`` in ``out``, ranked by
    ``model`` (the kernel's cost model by default).

    With ``shortlist``, only the default and the ``shortlist`` configs the model ranks
    best before compiling (:class:`Prescoring`) are compiled and ranked; the others are
    recorded as ``skipped``, not compiled.

    Raises :class:`TuneError` when the kernel has no cost model, compiles only on first
    launch, its default does not compile without spilling for a key, or ``shortlist`` is
    asked of a model that cannot rank before compiling."""
    model = model or cost_model(kernel)
    if shortlist is not None and not isinstance(model, Prescoring):
        raise TuneError(f"the cost model {model.name} cannot rank configs before they are compiled: no --shortlist")
    emit.check_writable(out)
    checked = [kernel.check_key(k) for k in keys]
    versions = {**toolchain.versions(), **tool_versions(kernel)}
    source_sha = kernel.source_sha256()
    report = PredictReport(device, model=(model.name, model.version))
    notify = progress or (lambda event, data: None)
    for key in checked:
        if resume and emit.already_tuned(out, kernel.name, key, device.identity, source_sha, versions):
            report.skipped += 1
            continue
        configs = candidate_configs(kernel, key, device, budget)
        chosen = _shortlisted(model, configs, key, device, shortlist)
        compiled = dict(zip(chosen, toolchain.compile_resources(kernel, key, [configs[i] for i in chosen], device,
                                                                model.block_threads), strict=True))
        candidates = _candidates(configs, compiled, shortlist)
        ranked = [i for i, c in enumerate(candidates) if c.status == "compiled"]
        if 0 not in ranked:
            raise TuneError(f"the default config of {kernel.name} cannot be served for {key} on {device.arch}: "
                            f"{candidates[0].message}")
        times = model.predict([configs[i] for i in ranked], key, device, [compiled[i] for i in ranked])  # type: ignore[misc]
        for i, predicted in zip(ranked, times, strict=True):
            candidates[i] = candidates[i].model_copy(update={"predicted_us": float(predicted)})
        winner = ranked[times.index(min(times))]
        artifact = Artifact(
            schema_version=SCHEMA_VERSION,
            kernel=KernelRef(name=kernel.name, version=kernel.version, source_sha256=source_sha),
            device=device,
            key=key,
            candidates=candidates,
            winner=Choice(config=configs[winner]),
            default=Choice(config=configs[0]),
            selection=Selection(rule="predicted", kept_default=winner == 0),
            provenance=Provenance(
                tool=f"flyconfigs {__version__}",
                backend=toolchain.name,
                backend_versions=versions,
                compile_options=toolchain.options(),
                host=emit.host(),
                created=emit.now_utc(),
                git_revision=emit.git_revision(),
                command=emit.command_line(),
                model=ModelRef(name=model.name, version=model.version),
            ),
        )
        report.artifacts.append(emit.write_artifact(out, artifact))
        for c in candidates:
            report.statuses[c.status] = report.statuses.get(c.status, 0) + 1
        notify("key", {"key": key, "candidates": len(candidates), "winner": configs[winner],
                       "predicted_us": min(times), "default_us": times[ranked.index(0)]})
    return report


def _shortlisted(model: CostModel, configs: list[dict[str, Any]], key: dict[str, Any], device: Device,
                 shortlist: int | None) -> list[int]:
    """The indices of the configs to compile: all, or the default and the ``shortlist``
    best by the model's score before compiling."""
    if shortlist is None:
        return list(range(len(configs)))
    assert isinstance(model, Prescoring)  # predict() checked it
    scores = model.prescores(configs, key, device)
    ranked = sorted(range(1, len(configs)), key=lambda i: (scores[i], i))
    return [0, *sorted(ranked[:shortlist])]


def _candidates(configs: list[dict[str, Any]], compiled: dict[int, str | Resources],
                shortlist: int | None) -> list[Candidate]:
    out = []
    for i, config in enumerate(configs):
        result = compiled.get(i)
        if result is None:
            out.append(Candidate(config=config, status="skipped",
                                 message=f"not among the cost model's {shortlist} best-ranked configs: not compiled"))
        elif isinstance(result, str):
            out.append(Candidate(config=config, status="compile_error", message=result))
        elif result.spill_bytes:
            out.append(Candidate(config=config, status="skipped", resources=result,
                                 message=f"spills {result.spill_bytes} bytes to scratch: not ranked"))
        else:
            out.append(Candidate(config=config, status="compiled", resources=result))
    return out
