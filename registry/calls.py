"""Calling a kernel family's members so that a plugin's fault never breaks a serving
call: its key check, its config check (after the declared tunables) and its default,
each fault reported once and naming where the declaration came from."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from flyconfigs.errors import InvalidKeyError, KernelPluginError
from flyconfigs.registry.contract import DEVICE_MATCHES, DeviceMatch, KernelDecl, KeyValue, SpelledKey, normalize_key
from flyconfigs.registry.kernels import TABLE, kernel_name, origin_of, raised
from flyconfigs.registry.problems import Problem, ProblemLog

if TYPE_CHECKING:
    from flyconfigs.registry.device import DeviceQuery

__all__ = ["check_config", "check_key", "check_tunables", "default_config", "device_match", "own_check_config",
           "report_fault", "spelled_key"]

def report_fault(decl: KernelDecl, member: str, exc: BaseException, consequence: str,
                  problems: ProblemLog | None) -> None:
    """Log a member of ``decl`` raising once per declaration and member in ``problems``
    (a resolver's log and fault set; default: the process-wide table's), however many
    calls meet it and whatever it says each time (a serving loop must not flood logs),
    naming the origin that resolver's kernel records give."""
    log = problems if problems is not None else TABLE.problems
    if not log.first_fault(decl, member):
        return
    where, distribution = origin_of(decl, log)
    log.report(Problem("kernel-error", where, f"{member} {raised(exc)}; {consequence}", distribution))



def check_key(decl: KernelDecl, key: object, problems: ProblemLog | None = None) -> dict[str, KeyValue]:
    """``key`` checked by the kernel's own :meth:`KernelDecl.check_key` (its axes and its
    family rules); :class:`InvalidKeyError` for anything it refuses.

    A check that raises anything else is the plugin's fault, not the caller's: it is
    reported once (``kernel-error``, naming the distribution) and the key is checked
    against the declared axes alone (:func:`normalize_key`), so serving goes on; every
    config served is still checked by the kernel's ``check_config``.  Raises
    :class:`KernelPluginError` when the axes cannot be read either."""
    if not isinstance(key, Mapping):
        raise InvalidKeyError(f"key for {kernel_name(decl)!r} must be a mapping of axis names to values, "
                              f"got {type(key).__name__}")
    try:
        return decl.check_key(key)
    except InvalidKeyError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's bug must not fail a serving call
        report_fault(decl, "check_key", exc, "keys are checked against the declared axes only", problems)
    try:
        return normalize_key(decl, key)
    except InvalidKeyError:
        raise
    except Exception as exc:  # noqa: BLE001 - the declared axes themselves cannot be read
        raise KernelPluginError(kernel_name(decl), origin_of(decl, problems)[0], "key_axes", raised(exc)) from None


def spelled_key(decl: KernelDecl, key: object, device: DeviceQuery | None,
                problems: ProblemLog | None = None) -> SpelledKey:
    """``key`` as the kernel's own :meth:`KernelDecl.spelled_key` reads its users'
    spelling (:class:`InvalidKeyError` for a spelling it refuses).  One that raises
    anything else is reported once (``kernel-error``) and ``key`` is taken as given."""
    if not isinstance(key, Mapping):
        raise InvalidKeyError(f"key for {kernel_name(decl)!r} must be a mapping of axis names to values, "
                              f"got {type(key).__name__}")
    try:
        spelled = decl.spelled_key(key, device)
        if not isinstance(spelled, SpelledKey):
            raise TypeError(f"answered {type(spelled).__name__}, not a SpelledKey")
        return spelled
    except InvalidKeyError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's bug must not fail a serving call
        report_fault(decl, "spelled_key", exc, "the key is taken as given", problems)
    return SpelledKey(dict(key), {})


def default_config(decl: KernelDecl, key: Mapping[str, KeyValue], device: DeviceQuery | None,
                   problems: ProblemLog | None = None) -> dict[str, KeyValue]:
    """The kernel's default heuristic for ``key`` on ``device``, as a plain dict.

    It is the last step of every resolution, so there is nothing left to fall back on:
    a heuristic that raises or returns anything but a mapping is reported once
    (``kernel-error``) and raised as :class:`KernelPluginError` naming the kernel, its
    distribution and the member.  A serving engine catches it (or
    :class:`~flyconfigs.errors.FlyconfigsError`) and runs its own default; an empty or
    made-up config would only fail later, at launch, with an unrelated error."""
    try:
        config = decl.default_config(key, device)
        if not isinstance(config, Mapping):
            raise TypeError(f"it returned a {type(config).__name__}, not a mapping")
        return dict(config)
    except Exception as exc:  # noqa: BLE001 - whatever the plugin raises becomes one typed error
        report_fault(decl, "default_config", exc, "calls that no artifact serves fail", problems)
        raise KernelPluginError(kernel_name(decl), origin_of(decl, problems)[0], "default_config",
                                f"{raised(exc)}; no artifact serves this call, so there is no config") from None


def check_tunables(decl: KernelDecl, config: Mapping[str, object]) -> str | None:
    """Why ``config`` is not a config of ``decl``'s declared :attr:`~KernelDecl.tunables`
    (a tunable missing that has no default, one not declared — for a family with
    :attr:`~KernelDecl.tunable_variants`, one its implementation does not hold — a value outside its set,
    where a value matches only one of the same JSON type: ``1`` is not ``True``), or
    ``None``; always ``None`` when the family declares no tunables."""
    tunables = decl.tunables
    if not tunables:
        return None
    defaults = decl.tunable_defaults
    names: Collection[str] = tunables
    variants = decl.tunable_variants
    if variants is not None:
        # One implementation's tunables: the selector's value (or its default) says which.
        chosen = config.get(variants.selector, defaults.get(variants.selector))
        member = next((held for value, held in variants.members.items()
                       if type(value) is type(chosen) and value == chosen), None)
        if member is None:
            return (f"{variants.selector}={chosen!r} is not one of "
                    f"{', '.join(map(str, variants.members))}")
        names = (variants.selector, *member)
    missing = [name for name in names if name not in config and name not in defaults]
    extra = sorted(str(name) for name in config if name not in names)
    if missing or extra:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(extra)}"] if extra else [])
        return f"not a {decl.name} config: {'; '.join(parts)}"
    for name, allowed in tunables.items():
        if name not in config:
            continue
        value = config[name]
        if not any(type(value) is type(choice) and value == choice for choice in allowed):
            return f"{name}={value!r} is not one of {', '.join(map(str, allowed))}"
    return None


def check_config(decl: KernelDecl, config: object, key: Mapping[str, KeyValue], device: DeviceQuery | None) -> str | None:
    """Why ``config`` cannot be served for ``key`` on ``device``, or ``None`` when the
    kernel accepts it: first its declared tunables (:func:`check_tunables`), then the
    family's own :meth:`KernelDecl.check_config`.  A check that raises counts as a
    refusal (with what it raised)."""
    if not isinstance(config, Mapping):
        return f"a config must be a mapping, got {type(config).__name__}"
    try:
        why = check_tunables(decl, config)
    except Exception as exc:  # noqa: BLE001 - a kernel's check failing on odd data is a refusal
        return f"the kernel's check raised {type(exc).__name__}: {exc}"
    return why if why is not None else own_check_config(decl, config, key, device)


def own_check_config(decl: KernelDecl, config: Mapping[str, object], key: Mapping[str, KeyValue],
                     device: DeviceQuery | None) -> str | None:
    """The second half of :func:`check_config`: the family's own
    :meth:`KernelDecl.check_config` alone, for a config whose tunables were checked (a
    table's rows share a few configs: their tunables are checked once each)."""
    try:
        return decl.check_config(config, key, device)
    except Exception as exc:  # noqa: BLE001 - a kernel's check failing on odd data is a refusal
        return f"the kernel's check raised {type(exc).__name__}: {exc}"


def device_match(decl: KernelDecl, problems: ProblemLog | None = None) -> DeviceMatch:
    """``decl.device_match`` checked: ``arch`` or ``product``.  One that raises or answers
    anything else is reported once (``kernel-error``) and counts as ``product``: a family
    that declares the member means to narrow what serves it, so where it fails only the
    asked product's own artifacts serve, never a config the family may have meant to
    keep from this device."""
    try:
        match = decl.device_match
        if not isinstance(match, str) or match not in DEVICE_MATCHES:
            raise TypeError(f"it is {match!r}, not one of {', '.join(map(repr, DEVICE_MATCHES))}")
        return match
    except Exception as exc:  # noqa: BLE001 - a plugin's member failing must not break serving
        report_fault(decl, "device_match", exc, "only artifacts of the asked product serve it", problems)
        return "product"
