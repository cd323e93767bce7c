"""The kernel declarations registered in this process (:func:`register_kernel`), and the
check every declaration passes when it is loaded or registered (:func:`check_members`).
Each resolver's kernel table copies the registrations into records of its own
(:meth:`KernelRecords.registered <flyconfigs.registry.families.loaded.KernelRecords.registered>`)."""

from __future__ import annotations

from flyconfigs.errors import FlyconfigsError, KernelPluginError, UnknownKernelError
from flyconfigs.registry.core.guard import Raised, guarded
from flyconfigs.registry.families.contract import NAME_PATTERN, REQUIRED, KernelDecl

__all__ = ["check_members", "register_kernel", "registered_names", "unregister_kernel"]


def check_members(decl: object, kernel: str, where: str) -> str:
    """``decl``'s name once it is proven a declaration with every required member;
    :class:`UnknownKernelError` saying what is wrong, :class:`KernelPluginError` when a
    member raises."""
    if not isinstance(decl, KernelDecl):
        raise UnknownKernelError(f"kernel {kernel!r}: {where} is not a KernelDecl: a plugin's object must be an "
                                 f"instance of a subclass of flyconfigs.registry.KernelDecl (got {type(decl).__name__})")
    missing = []
    for member in REQUIRED:
        value = guarded(getattr, decl, member)
        if isinstance(value, Raised) and isinstance(value.exc, AttributeError):
            missing.append(member)
        elif isinstance(value, Raised):
            raise KernelPluginError(kernel, where, member, str(value))
    if missing:
        raise UnknownKernelError(f"kernel {kernel!r}: {where} gives no {', '.join(missing)}")
    name = decl.name
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise UnknownKernelError(f"kernel {kernel!r}: {where} has name {name!r}, not a kernel name")
    return name


changes = 0
"""Counts the registrations, their removals and the kernel tables cleared in this process:
while it stands still, a kernel's name means the record it meant (a memo keyed by names
checks it)."""


def note_change() -> None:
    """Move :data:`changes` on: what a kernel's name means may have changed."""
    global changes
    changes += 1


class _Registrations:
    """The declarations registered in this process, by name, and a generation that
    every change increments (each table copies them when it differs from its own)."""

    def __init__(self) -> None:
        self.declared: dict[str, KernelDecl] = {}
        self.generation = 0

    def change(self, name: str, decl: KernelDecl | None) -> None:
        if decl is None:
            if self.declared.pop(name, None) is None:
                return
        else:
            self.declared[name] = decl
        self.generation += 1
        note_change()


_REGISTRATIONS = _Registrations()


def register_kernel(decl: KernelDecl) -> KernelDecl:
    """Declare ``decl`` in this process; it is served under its name instead of an
    entry point's declaration.  When another distribution declares that name, the first
    lookup reports it (``kernel-collision``); a declaration that is its entry point's
    own object keeps its distribution (and so its owner's packages).

    Raises :class:`TypeError` for an object that is not a
    :class:`~flyconfigs.registry.KernelDecl` with a kernel name and every required
    member."""
    try:
        name = check_members(decl, getattr(decl, "name", "?") if isinstance(decl, KernelDecl) else "?",
                              f"a {type(decl).__name__} registered in this process")
    except FlyconfigsError as exc:
        raise TypeError(str(exc)) from None
    _REGISTRATIONS.change(name, decl)
    return decl


def unregister_kernel(name: str) -> None:
    """Forget an in-process declaration (tests use this)."""
    _REGISTRATIONS.change(name, None)


def registered_names() -> list[str]:
    """The names of the kernels registered in this process."""
    return list(_REGISTRATIONS.declared)
