"""The registry's check of a config against a family's declared tunables, before the
family's own ``check_config`` runs (:meth:`Family.check_config
<flyconfigs.registry.families.family.Family.check_config>`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from flyconfigs.registry.families.contract import KernelDecl

__all__ = ["check_tunables"]


def check_tunables(decl: KernelDecl, config: Mapping[str, object]) -> str | None:
    """Why ``config`` is not a config of ``decl``'s declared :attr:`~KernelDecl.tunables`
    (a tunable missing that has no default, one not declared — for a family with
    :attr:`~KernelDecl.tunable_variants`, one its implementation does not hold — a value outside its set,
    where a value matches only one of the same JSON type: ``1`` is not ``True``), or
    ``None``; always ``None`` when the family declares no tunables.  Raises what the
    declaration's members raise."""
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
