"""Leave-one-out of the rules that serve a key between tuned ones, over a folder of
measured artifacts, on the CPU: every figure comes from the recorded timings.

Three ways of hiding, for every kernel with candidate timings (RMSNorm, fused add +
RMSNorm) and every device in the folder (the H100 and the H200 in ``artifacts/sm90``):

- ``key``: one tuned key is hidden, the device's other keys serve it;
- ``n``: every key of the hidden key's row length ``N`` is hidden;
- ``m``: every key of the hidden key's row count ``M`` is hidden (what a call of a batch
  size no tuning ran meets: the learned default reads another row count's tunings).

For each hidden key, the nearest-key step is replayed as the resolver runs it on one
device's folder (tuned keys of the same exact axes ranked by the family's
``key_distance``, the nearest winner that fits, adapted where it must be, then the
family's ``choose_from_neighbours`` over the same ranked keys, its answer served only
where the family's checks accept it); ``--check K`` resolves the first K hidden keys of
each device through the real :class:`~flyconfigs.registry.Resolver` too and fails on any
difference.  Where the family's default is learned (RMSNorm's table,
:mod:`flyconfigs.kernels.rmsnorm.default`), it is refitted without what is hidden, on the
same device's tunings, for every rule.

The rules:

- ``default``: the family's default heuristic (refitted);
- ``nearest``: the nearest key's winner, adapted where it must be;
- ``vote``: the neighbourhood vote of :mod:`flyconfigs.kernels.neighbour_vote`, without
  the default among its candidates (what RMSNorm shipped before the paired rule);
- ``paired``: :mod:`flyconfigs.kernels.paired_evidence` with fixed margins
  (``PairedEvidence()``, what the fused family serves) and the family's
  ``transfers_past_range`` (``M`` for both families);
- ``paired-se``: the same rule with the variance-aware test (``PairedEvidence(margin=0.005,
  confidence=2.0)``, what RMSNorm serves): every timed config offered, the candidate
  served only where its paired advantage beats the default by the transfer error plus
  two standard errors;
- ``sibling``: the sibling device's winner at the same key (the other card in the
  folder), which the registry's precedence serves before the asked device's nearest key
  unless the family's ``own_device_first`` says otherwise; hiding mode does not change it;
- ``winner``: not a rule, the reference: the hidden key's own tuned winner, what tuning
  that key served.  No rule that never saw the key does better in truth, so its figures
  are the floor of each figure as this benchmark can measure it.

Per rule, kernel, device and mode: ``geomean`` of the served config's time over the best
recorded at the hidden key, ``worse_than_default`` (keys where it is more than 3% slower
than the default's config there), ``worst``, and ``untimed`` (keys whose own tuning never
timed the served config; left out of the figures); and ``final``, the same like with
like: over the keys whose tuning timed the served config in its final protocol, its time
over the best final time there (the best recorded can be a screen time, a few samples of a
shorter replay, which on some keys reads 10-15% below every final: ``protocols`` per card
says how often and by how much).  ``--calibrate`` prints the margin's
two parts measured on the folder (:mod:`bench.neighbour_calibrate`): the tuner's noise band and the spread of a neighbour's
paired advantage carried to the key beside it.

    python -m bench.neighbour_vote --out bench/results/neighbour-vote-loo.json --check 40
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from bench.common import machine
from bench.loo_scores import RULES, WORSE, figure, protocols, summary
from bench.neighbour_calibrate import calibrate
from flyconfigs.kernels.fused_add_rmsnorm import SPEC as FUSED
from flyconfigs.kernels.neighbour_vote import NeighbourVote, VotesAmongNeighbours
from flyconfigs.kernels.paired_evidence import DefaultUnlessEvidence, PairedEvidence
from flyconfigs.kernels.rmsnorm import SPEC as RMSNORM
from flyconfigs.kernels.rmsnorm import default as rmsnorm_default
from flyconfigs.kernels.rmsnorm.fit_default import KEEP, WITHIN
from flyconfigs.registry import DeviceQuery, KernelDecl, Resolver
from flyconfigs.registry.families.family import Family
from flyconfigs.registry.plugin import check_config, default_config
from flyconfigs.registry.search.neighbourhood import Neighbour, config_token, measurements
from flyconfigs.schema import Artifact
from flyconfigs.schema.pack import folder_artifacts

__all__ = ["MODES", "Tuned", "check", "fold_tables", "hidden_of", "leave_one_out", "main", "measured", "rules_of", "serve",
           "tuned_of"]

ROOT = Path(__file__).resolve().parents[1]
CONFIDENT = PairedEvidence(margin=0.005, confidence=2.0)
"""The variance-aware test (``paired-se``), RMSNorm's rule: the transfer error (0.4-0.6%,
``--calibrate``) as the margin, two standard errors above it."""
MODES = ("key", "n", "m")


@dataclass
class Tuned:
    """One measured artifact as the benchmark reads it."""

    path: Path
    artifact: Artifact
    key: dict[str, Any]
    times: dict[Any, float]
    best: float
    neighbour: Neighbour
    finals: frozenset[Any] = frozenset()
    """The configs (slots) the key's tuning timed in its final protocol (the winner, the
    default and the few the screen sent on); the others' times are screen times."""

    @property
    def best_final(self) -> float | None:
        """The fastest time of the key's final protocol, ``None`` where it has none."""
        held = [self.times[s] for s in self.finals if s in self.times]
        return min(held) if held else None


def tuned_of(path: Path, artifact: Artifact, spec: KernelDecl) -> Tuned:
    """``artifact``'s timings (through :func:`~flyconfigs.registry.search.neighbourhood.measurements`,
    the one reader of its candidates) and the neighbour it is to a key it does not hold."""
    defaults = spec.tunable_defaults
    measured = measurements(artifact)
    times: dict[Any, float] = {}
    for config, median, _ in sorted(measured, key=lambda m: -m[1]):  # a config timed twice keeps its faster time
        times[config_token(config, defaults)] = median
    timings = tuple((MappingProxyType(dict(c)), t) for c, t, _ in sorted(measured, key=lambda m: m[1]))
    finals = frozenset(config_token(c, defaults) for c, _, final in measured if final)
    neighbour = Neighbour(MappingProxyType(dict(artifact.key)), (0.0,), MappingProxyType(dict(artifact.winner.config)),
                          timings, str(path), dict(times), defaults, finals,
                          None if artifact.default is None else MappingProxyType(dict(artifact.default.config)))
    return Tuned(path, artifact, dict(artifact.key), times, min(times.values()), neighbour, finals)


def measured(folder: Path, kernel: str, spec: KernelDecl) -> dict[str, list[Tuned]]:
    """The measured artifacts of ``kernel`` in ``folder`` that timed candidates, by device product."""
    out: dict[str, list[Tuned]] = defaultdict(list)
    # A pack's rows (or single files) each as the file the tuner would have written.
    for artifact in folder_artifacts(folder, kernel):
        if artifact.kernel.name == kernel and artifact.selection.rule == "beat-default-beyond-noise":
            tuned = tuned_of(Path(artifact.file_name()), artifact, spec)
            if tuned.times:
                out[artifact.device.product or "unknown"].append(tuned)
    return dict(out)


# -- the family's default, refitted without what is hidden ---------------------------------

class _Refit:
    """Mixed into RMSNorm's declaration: its learned default read from the table the
    instance is given (``fold_table``), not the shipped one."""

    fold_table: rmsnorm_default.DefaultTable | None = None

    def _default(self, norm: Mapping[str, Any], device: DeviceQuery | None, w: int,
                 candidates: list[dict[str, Any]]) -> dict[str, Any]:
        units = device.compute_units if device is not None else None
        table = self.fold_table if self.fold_table is not None else rmsnorm_default.table()
        chosen = rmsnorm_default.choose(table, norm, units, candidates)
        return dict(chosen) if chosen is not None else self.rule_of_thumb(norm, w)  # type: ignore[attr-defined]


def fold_tables(spec: KernelDecl, tuned: Sequence[Tuned]) -> Callable[[set[int]], Any] | None:
    """For a family with a learned default: the table fitted on ``tuned`` less the keys
    at the given indices (each key makes its own cells, so a fold drops them)."""
    if spec.name != "rmsnorm":
        return None
    defaults = spec.tunable_defaults
    fitted = rmsnorm_default.build(
        [(t.key, [(RMSNORM.complete_config({**defaults, **c}), m) for c, m, _ in measurements(t.artifact)])
         for t in tuned], tuned[0].artifact.device.compute_units or 0, KEEP, WITHIN)
    cell_of = [(str(t.key["dtype"]), str(t.key["weight_dtype"]), int(t.key["M"]), int(t.key["N"])) for t in tuned]

    def table(hidden: set[int]) -> rmsnorm_default.DefaultTable:
        drop = {cell_of[i] for i in hidden}
        return rmsnorm_default.DefaultTable(fitted.compute_units,
                                            {c: s for c, s in fitted.cells.items() if c not in drop})

    return table


def rules_of(spec: KernelDecl, paired: PairedEvidence | None = None) -> dict[str, KernelDecl]:
    """The declarations compared: ``spec`` with no neighbourhood rule, with the vote and
    with the paired rule (its ``transfers_past_range``), each with a refittable default
    where the family's is learned."""
    base: type = type(spec)
    if spec.name == "rmsnorm":
        base = type(f"{base.__name__}Refit", (_Refit, base), {})

    def off(self: Any, asked: Any, neighbours: Any, device: Any) -> None:
        return None

    transfers = tuple(getattr(spec, "transfers_past_range", ("M",)))
    return {
        "default": base(),
        "nearest": type(f"{base.__name__}Nearest", (base,), {"choose_from_neighbours": off})(),
        "vote": type(f"{base.__name__}Vote", (base,), {
            "choose_from_neighbours": VotesAmongNeighbours.choose_from_neighbours,
            "neighbour_vote": NeighbourVote()})(),
        "paired": type(f"{base.__name__}Paired", (base,), {
            "choose_from_neighbours": DefaultUnlessEvidence.choose_from_neighbours,
            "transfers_past_range": transfers, "paired_evidence": paired or PairedEvidence()})(),
        "paired-se": type(f"{base.__name__}PairedSE", (base,), {
            "choose_from_neighbours": DefaultUnlessEvidence.choose_from_neighbours,
            "transfers_past_range": transfers, "paired_evidence": CONFIDENT})(),
    }


# -- the nearest-key step, replayed -------------------------------------------------------

def _exact(decl: KernelDecl, key: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(key.get(a.name) for a in decl.key_axes if not a.ordinal)


def serve(decl: KernelDecl, asked: dict[str, Any], pool: Sequence[Tuned], query: DeviceQuery,
          default_only: bool = False) -> tuple[dict[str, Any], str]:
    """What ``decl`` serves for ``asked`` from ``pool`` (one device's tuned keys, the
    hidden ones left out), and from where: ``default``, ``nearest`` or ``rule``."""
    if default_only:
        return default_config(decl, asked, query), "default"
    exact = _exact(decl, asked)
    ranked: list[tuple[tuple[float, ...], int, Tuned]] = []
    for i, t in enumerate(pool):
        if _exact(decl, t.key) != exact:
            continue
        distance = Family.of_declaration(decl).distance(asked, t.key)
        if distance is not None:
            ranked.append((distance, i, t))
    ranked.sort(key=lambda r: (r[0], r[1]))
    for _, _, t in ranked:
        config = dict(t.artifact.winner.config)
        if check_config(decl, config, asked, query) is not None:
            adapted = Family.of_declaration(decl).adapt(config, asked, query)
            if adapted is None or check_config(decl, adapted, asked, query) is not None:
                continue
            config = adapted
        if Family.of_declaration(decl).pass_over(asked, t.key, config, query) is not None:
            continue

        def offer() -> Iterator[Neighbour]:
            for d, _, other in ranked:
                yield replace(other.neighbour, distance=d)

        answer = decl.choose_from_neighbours(asked, offer(), query)
        if answer is not None and check_config(decl, answer[0], asked, query) is None:
            return dict(answer[0]), "rule"
        return config, "nearest"
    return default_config(decl, asked, query), "default"


def hidden_of(tuned: Sequence[Tuned], i: int, mode: str) -> set[int]:
    """The indices hidden with key ``i``: itself (``key``), or every key of its row length
    (``n``) or of its row count (``m``)."""
    if mode == "key":
        return {i}
    axis = {"n": "N", "m": "M"}[mode]
    return {j for j, o in enumerate(tuned) if o.key[axis] == tuned[i].key[axis]}


def leave_one_out(spec: KernelDecl, tuned: list[Tuned], sibling: list[Tuned] | None, mode: str,
                  limit: int = 0) -> list[dict[str, Any]]:
    """One row per hidden key (the first ``limit`` only, where given): per rule the
    served config's time over the best recorded at the key (``None`` where the key never
    timed it) and what served it."""
    rules = rules_of(spec)
    tables = fold_tables(spec, tuned)
    defaults = spec.tunable_defaults
    theirs = {json.dumps(t.key, sort_keys=True): t for t in sibling or []}
    rows = []
    for i, t in enumerate(tuned[:limit] if limit else tuned):
        hidden = hidden_of(tuned, i, mode)
        pool = [o for j, o in enumerate(tuned) if j not in hidden]
        table = tables(hidden) if tables is not None else None
        query = DeviceQuery.of(t.artifact.device.identity)
        row: dict[str, Any] = {"key": t.key}
        for name, decl in rules.items():
            if table is not None:
                object.__setattr__(decl, "fold_table", table)
            config, how = serve(decl, t.key, pool, query, default_only=name == "default")
            row[name] = figure(t, config, how, defaults)
        other = theirs.get(json.dumps(t.key, sort_keys=True))
        row["sibling"] = None if other is None else figure(t, dict(other.artifact.winner.config), "exact", defaults)
        row["winner"] = figure(t, dict(t.artifact.winner.config), "tuned", defaults)
        rows.append(row)
    return rows


# -- the cross-check through the resolver ------------------------------------------------------

def check(spec: KernelDecl, tuned: list[Tuned], limit: int, mode: str) -> int:
    """Resolve the first ``limit`` hidden keys through the real resolver from a folder
    of the device's other artifacts (the shipped default: no refit, rules ``nearest``,
    ``vote`` and ``paired``) and count the keys where it serves another config than the
    replay."""
    rules = {name: decl for name, decl in rules_of(spec).items() if name != "default"}
    for decl in rules.values():
        object.__setattr__(decl, "fold_table", None)
    differ = 0
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work) / "pool"
        folder.mkdir()
        for i, t in enumerate(tuned[:limit]):
            hidden = hidden_of(tuned, i, mode)
            for child in folder.iterdir():
                child.unlink()
            for j, o in enumerate(tuned):
                if j not in hidden:  # each as the single file the tuner writes (a pack's row too)
                    (folder / o.path.name).write_bytes(o.artifact.to_json_bytes())
            pool = [o for j, o in enumerate(tuned) if j not in hidden]
            query = DeviceQuery.of(t.artifact.device.identity)
            resolver = Resolver([str(folder)], detector=None, packages=False)
            for name, decl in rules.items():
                served = dict(resolver.resolve(decl, t.key, query).config)
                replayed, _ = serve(decl, t.key, pool, query)
                if config_token(served, spec.tunable_defaults) != config_token(replayed, spec.tunable_defaults):
                    differ += 1
                    print(f"  differs: {name} at {t.key}: resolver {served}, replay {replayed}", flush=True)
    return differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", type=Path, default=ROOT / "artifacts" / "sm90")
    parser.add_argument("--kernel", action="append", choices=("rmsnorm", "fused_add_rmsnorm"),
                        help="kernels to measure (default both)")
    parser.add_argument("--mode", action="append", choices=MODES, help="ways of hiding (default all three)")
    parser.add_argument("--limit", type=int, default=0, help="hide only the first N keys of each device (a quick check)")
    parser.add_argument("--check", type=int, default=0,
                        help="also resolve the first K hidden keys of each device through the resolver")
    parser.add_argument("--calibrate", action="store_true", help="print the margin's calibration and stop")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    specs: dict[str, KernelDecl] = {"rmsnorm": RMSNORM, "fused_add_rmsnorm": FUSED}
    results: dict[str, Any] = {}
    rows_out: dict[str, Any] = {}
    checked: dict[str, Any] = {}
    started = time.perf_counter()
    for kernel in args.kernel or list(specs):
        by_device = measured(args.artifacts, kernel, specs[kernel])
        for product, tuned in sorted(by_device.items()):
            if args.calibrate:
                print(kernel, product, json.dumps(calibrate(specs[kernel], tuned), indent=1), flush=True)
                continue
            sibling = next((v for p, v in by_device.items() if p != product), None)
            results.setdefault(kernel, {}).setdefault(product, {})["protocols"] = protocols(tuned)
            for mode in args.mode or MODES:
                print(f"{kernel} on {product}, hiding each {mode}: {len(tuned)} keys", flush=True)
                rows = leave_one_out(specs[kernel], tuned, sibling, mode, args.limit)
                results.setdefault(kernel, {}).setdefault(product, {})[mode] = summary(rows)
                rows_out.setdefault(kernel, {}).setdefault(product, {})[mode] = rows
                print(json.dumps({r: results[kernel][product][mode][r] for r in RULES}), flush=True)
                if args.check:
                    differ = check(specs[kernel], tuned, args.check, mode)
                    checked.setdefault(kernel, {}).setdefault(product, {})[mode] = {"keys": args.check,
                                                                                    "differ": differ}
                    if differ:
                        print(f"{differ} resolves differ from the replay", file=sys.stderr)
                        return 1
    if args.calibrate or args.out is None:
        return 0
    payload = {
        "benchmark": "neighbour-vote-loo", "machine": machine(), "revision": _revision(),
        "command": "python -m bench.neighbour_vote " + " ".join(argv if argv is not None else sys.argv[1:]),
        "paired": asdict(PairedEvidence()), "paired-se": asdict(CONFIDENT), "worse_than_default_by": WORSE,
        "artifacts": str(args.artifacts.relative_to(ROOT)) if args.artifacts.is_relative_to(ROOT) else str(args.artifacts),
        "checked_through_resolver": checked,
        "seconds": round(time.perf_counter() - started, 1),
        "summary": results, "rows": rows_out,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")
    return 0


def _revision() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


if __name__ == "__main__":
    raise SystemExit(main())
