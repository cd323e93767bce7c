"""``flyconfigs list``, ``show``, ``explain`` and ``doctor``: what is installed, what a
call would get and why, and what is wrong."""

from __future__ import annotations

import argparse
from typing import Any

from flyconfigs.cli._common import add_command, emit_json, parse_key

__all__ = ["register"]


SERVED_ONLY = "declared to serve configs imported with `flyconfigs import`; not tunable here"


def _tunable(name: str) -> bool:
    """Whether ``name``'s declaration can be tuned (a TunableKernel), or only serves
    what was imported for it."""
    from flyconfigs.errors import FlyconfigsError
    from flyconfigs.kernels.plugin import TunableKernel
    from flyconfigs.registry import kernel_declaration

    try:
        return isinstance(kernel_declaration(name), TunableKernel)
    except FlyconfigsError:
        return False


def _list(args: argparse.Namespace) -> int:
    from flyconfigs.registry import declared_kernels, default_resolver

    kernels = declared_kernels(default_resolver().problems)
    packages = default_resolver().packages()
    tunable = {k.name: k.problem is None and _tunable(k.name) for k in kernels}
    if args.json:
        emit_json({"command": "list", "kernels": [{**k.__dict__, "tunable": tunable[k.name]} for k in kernels],
                   "packages": [{**p.__dict__, "families": list(p.families)} for p in packages]})
        return 0
    print("kernels:" if kernels else "no kernels declared")
    for k in kernels:
        owner = f"{k.distribution} {k.distribution_version or ''}".rstrip() if k.distribution else "this process"
        if k.problem is not None:
            print(f"  {k.name}  from {owner}  cannot be loaded: {k.problem}")
        else:
            served = "" if tunable[k.name] else f"  served only: {SERVED_ONLY}"
            print(f"  {k.name} version {k.version}  from {owner}{served}")
    print("packages:" if packages else "no flyconfigs data packages installed")
    for p in packages:
        print(f"  {p.distribution} {p.version}  target {p.target}  schema {p.schema_version}  {p.size()}  "
              f"families {', '.join(p.families) or 'none'}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from flyconfigs.registry import default_resolver, kernel_declaration

    decl = kernel_declaration(args.kernel)
    rows: list[dict[str, Any]] = []
    for entry in default_resolver().all_entries():
        if entry.kernel != decl.name:
            continue
        rows.append(
            {
                "key": entry.key,
                "device": entry.device.describe(),
                "source": entry.source.name,
                "version": entry.source.version,
                "file": str(entry.path),
            }
        )
    axes = [{"name": a.name, "kind": a.kind.__name__, "ordinal": a.ordinal} for a in decl.key_axes]
    if args.json:
        emit_json({"command": "show", "kernel": decl.name, "version": decl.version, "axes": axes, "artifacts": rows})
        return 0
    print(f"{decl.name} (family version {decl.version}); key: " + ", ".join(
        f"{a['name']}{' (ordinal)' if a['ordinal'] else ''}" for a in axes
    ))
    for r in rows:
        key = " ".join(f"{k}={v}" for k, v in r["key"].items())
        print(f"  {key}  on {r['device']}  from {r['source']} {r['version'] or ''}".rstrip())
    if not rows:
        print("  no artifacts installed; every key gets the default heuristic")
    return 0


def _completed(kernel: str, key: dict[str, object]) -> tuple[dict[str, object], dict[str, object]]:
    """``key`` with the axes the kernel fills in itself, as the tuner fills them
    (``weight_dtype`` defaults to ``dtype`` for the row norms), and those filled in."""
    from flyconfigs.errors import FlyconfigsError
    from flyconfigs.kernels.plugin import complete_key
    from flyconfigs.registry import kernel_declaration

    try:
        full: dict[str, object] = dict(complete_key(kernel_declaration(kernel), key))
    except (FlyconfigsError, KeyError, TypeError, ValueError):
        return key, {}  # explain names what is wrong with the key as given
    return full, {k: v for k, v in full.items() if k not in key}


def _typed(value: object) -> str:
    """``value`` as it is typed in ``AXIS=VALUE``: ``null``, ``true``/``false`` and lists as
    JSON, other values as themselves (``bf16``, ``4096``)."""
    import json

    if value is None or isinstance(value, (bool, list, dict, tuple)):
        return json.dumps(value)
    return str(value)


def _pairs(mapping: Any) -> str:
    return " ".join(f"{k}={_typed(v)}" for k, v in mapping.items())


def _check_device_env(given: str | None) -> None:
    """:class:`Usage` naming ``FLYCONFIGS_DEVICE`` when it decides the device (no
    ``--device``) and is not one: what it explains would be for no device at all."""
    import os

    from flyconfigs.cli._common import Usage
    from flyconfigs.errors import ArtifactError
    from flyconfigs.registry import DEVICE_ENV, parse_device_spec

    spec = os.environ.get(DEVICE_ENV)
    if given is not None or not spec:
        return
    try:
        parse_device_spec(spec, DEVICE_ENV)
    except ArtifactError as exc:
        raise Usage(f"{DEVICE_ENV}={spec!r} is not a device: {exc.problems[0]}") from None


def _explain(args: argparse.Namespace) -> int:
    from flyconfigs.kernels.flydsl import declaration_of
    from flyconfigs.registry import default_resolver

    _check_device_env(args.device)
    key, filled = _completed(args.kernel, parse_key(args.key))
    # A FlyDSL kernel no package declares is explained by its key as given (flydsl.<name>).
    resolution, steps = default_resolver().explain(declaration_of(args.kernel, key), key, args.device)
    if args.json:
        emit_json(
            {
                "command": "explain",
                "resolution": resolution.as_json(),
                "filled_in": filled,
                "steps": [{"looked_for": s.looked_for, "outcome": s.outcome} for s in steps],
            }
        )
        return 0
    if filled:
        print(f"key: {_pairs(filled)} filled in, as the tuner fills it in")
    for number, step in enumerate(steps, 1):
        print(f"{number}. {step.looked_for}: {step.outcome}")
    config = _pairs(resolution.config)
    where: str = resolution.source
    if resolution.origin:
        where += f" {resolution.origin}" + (f" {resolution.version}" if resolution.version else "")
    borrowed = f", borrowed from {resolution.matched_device.describe()}" if resolution.borrowed and resolution.matched_device else ""
    if resolution.key_match == "nearest" and resolution.matched_key is not None:
        borrowed = f" (tuned at {_pairs(resolution.matched_key)}){borrowed}"
    how = {"predicted": "; predicted (not measured on this device)", "imported": "; imported"}.get(resolution.selection or "", "")
    print(f"=> {config}  [{where}; device {resolution.layer}, key {resolution.key_match}{borrowed}{how}]")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from flyconfigs.gpu import backend_for_vendor
    from flyconfigs.registry import doctor, parse_device_spec

    given = None if args.device is None else parse_device_spec(args.device, "--device")
    report = doctor(given)
    device, how = report.device, "given by --device" if given is not None else report.device_source
    notes = [f"{p.count} {p.kernel} artifacts for {device.describe()} are predicted (compiled and ranked by a model, "
             f"never measured on this device): measure them here with `flyconfigs tune {p.kernel} --backend "
             f"{backend_for_vendor(device.vendor)} --key-grid … --out DIR` and publish the result as a newer version; "
             f"measured beats predicted" for p in report.predicted if device is not None]
    collisions = report.collisions
    if args.json:
        emit_json(
            {
                "command": "doctor",
                "device": None if device is None else device.describe(),
                "device_source": how,
                "override_directories": [str(p) for p in report.override_directories],
                "packages": [p.__dict__ for p in report.packages],
                "problems": [p.__dict__ for p in report.problems],
                "errors": list(report.errors),
                "warnings": list(report.warnings),
                "notes": notes,
                "collisions": [
                    {"kernel": c.kernel, "key": dict(c.key), "device": c.device.describe(), "winner": c.winner,
                     "shadowed": list(c.shadowed), "expected": c.expected, "contested": c.contested,
                     "standings": list(c.standings)}
                    for c in collisions
                ],
            }
        )
    else:
        print(f"device: {device.describe() if device else 'unknown'} ({how})")
        for folder in report.override_directories:
            print(f"override directory: {folder}{'' if folder.is_dir() else ' (missing)'}")
        for p in report.packages:
            print(f"package: {p.distribution} {p.version} target {p.target}, {p.size()}")
        for c in collisions:
            if c.contested:
                print(f"collision: {c.kernel} {dict(c.key)} on {c.device.describe()}: contested by {c.winner} and "
                      f"{', '.join(c.shadowed)} ({c.standings[0]}), neither served (unexpected)")
                continue
            print(f"collision: {c.kernel} {dict(c.key)} on {c.device.describe()}: {c.winner} ({c.standings[0]}) shadows "
                  f"{', '.join(c.shadowed)}{'' if c.expected else ' (unexpected)'}")
        for problem in report.problems:
            print(f"problem: {problem}")
        for error in report.errors:
            print(f"error: {error}")
        for warning in report.warnings:
            print(f"warning: {warning}")
        for note in notes:
            print(f"note: {note}")
        failed = len(report.problems) + len(report.errors)
        print("ok" if not failed and not report.warnings else f"{failed} problem(s), {len(report.warnings)} warning(s)")
    return 0 if report.ok else 1


def register(sub: Any) -> None:
    """Add ``list``, ``show``, ``explain`` and ``doctor``."""
    add_command(sub, "list", _list, "list declared kernels and installed data packages")
    p = add_command(sub, "show", _show, "show a kernel's key axes and the artifacts installed for it")
    p.add_argument("kernel")
    p = add_command(sub, "explain", _explain, "which config a call would get, and why, step by step")
    p.add_argument("kernel")
    p.add_argument("key", nargs="+", metavar="AXIS=VALUE")
    p.add_argument("--device", help="device spec (as FLYCONFIGS_DEVICE); default: the current device")
    p = add_command(sub, "doctor", _doctor, "check the device, sources, artifacts and collisions (exit 1 on a problem "
                    "or an unexpected collision; warnings exit 0)")
    p.add_argument("--device", help="device spec (as FLYCONFIGS_DEVICE); default: the current device")
