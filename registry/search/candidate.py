"""Whether one candidate serves one call: the checks the search applies to each entry
it reaches (its tuned key, its binding, its file, its winner), in :class:`Judge`."""

from __future__ import annotations

from typing import Any

from flyconfigs.errors import FlyconfigsError, InvalidKeyError
from flyconfigs.registry.checks.binding import binding_problem
from flyconfigs.registry.checks.check import refusal
from flyconfigs.registry.core.axes import KeyValue
from flyconfigs.registry.core.problems import Problem
from flyconfigs.registry.families.family import Family
from flyconfigs.registry.families.loaded import LoadedKernel
from flyconfigs.registry.search.serving import ROUTINE, Found
from flyconfigs.registry.sources.device import DeviceQuery
from flyconfigs.registry.sources.entries import Entry
from flyconfigs.schema.canonical import canonical_text
from flyconfigs.schema.models import KernelRef

__all__ = ["Judge"]


class Judge:
    """The checks of one call (``family`` at ``key`` on ``query``), applied to each entry
    the search reaches; every problem of a file is reported once to the family's log."""

    def __init__(self, family: Family, key: dict[str, KeyValue], query: DeviceQuery) -> None:
        self.family, self.decl, self.problems = family, family.decl, family.problems
        self.key, self.query = key, query
        self.text = canonical_text(key)

    def usable(self, entry: Entry, distance: tuple[float, ...]) -> Found | str:
        """What ``entry`` serves for this call, or why not (``path: reason``, for the
        record's reasons): a tuned key the family refuses, a stale file, an unreadable
        one, or a winner :meth:`serve` refuses."""
        refused = self.key_refusal(entry)
        if refused is not None:
            return f"{entry.path}: {self.decl.name} refuses its key: {refused}"
        stale = self.stale_by_tail(entry)
        if stale is not None:
            return f"{entry.path}: stale: {stale}"
        artifact = entry.load(self.problems)
        if artifact is None:
            return f"{entry.path}: unusable ({self.last_problem(entry)})"
        found = self.serve(artifact, entry, distance)
        return found if isinstance(found, Found) else f"{entry.path}: {found}"

    def stale_by_tail(self, entry: Entry) -> str | None:
        """Why ``entry`` is stale for the installed family by the kernel version and
        source its file's tail records (reported once, as :meth:`serve` reports it), or
        ``None``: after a version bump a folder of stale files is passed over without
        reading each one whole.  The file is still judged in full when it is read."""
        if entry.binding is None:
            return None
        version, sha = entry.binding
        kernel = self.family.kernel
        digest = (lambda: kernel.digest) if isinstance(kernel, LoadedKernel) else None
        why = binding_problem(self.decl, KernelRef.model_construct(name=entry.kernel, version=version, source_sha256=sha),
                              entry.rule, digest)
        if why is not None:
            dist = entry.source.name if entry.source.kind == "package" else None
            self.problems.report(Problem("stale-artifact", str(entry.path), why, dist))
        return why

    def key_refusal(self, entry: Entry) -> str | None:
        """Why the kernel's own ``check_key`` refuses ``entry``'s tuned key (reported
        once: a problem of the file), or ``None``.  A tuned key is judged as an asked one,
        so a file keyed ``M=-64`` never serves as the nearest key to ``M=1``; the asked
        key passed the check already, and a check that fails in the plugin is its fault,
        reported by :meth:`~flyconfigs.registry.families.family.Family.check_key`, not the file's."""
        if self.asked(entry):
            return None
        try:
            self.family.check_key(entry.key)
        except InvalidKeyError as exc:
            dist = entry.source.name if entry.source.kind == "package" else None
            self.problems.report(Problem("invalid-key", str(entry.path),
                                         f"{self.decl.name} refuses its key {dict(entry.key)}: {exc}", dist))
            return str(exc)
        except FlyconfigsError:
            return None
        return None

    def serve(self, artifact: Any, entry: Entry, distance: tuple[float, ...]) -> Found | str:
        """What a loaded artifact serves for this call: its winner unless the one rule
        :func:`~flyconfigs.registry.checks.check.refusal` (which validate applies too) refuses
        it for the key; at a nearer key's artifact whose winner the rule accepts for its
        own key, the winner as the kernel adapts it to the key (its optional
        ``adapt_config``), checked again, unless the family passes it over; else why
        not.  A winner refused for the artifact's own key is a problem of the artifact
        (logged once); one that only does not fit the key is routine."""
        kernel, key, query = self.family.kernel, self.key, self.query
        refused = refusal(kernel, artifact, key, query)
        if refused is None:
            return self.neighbour(Found(entry, artifact, dict(artifact.winner.config), None, distance))
        kind, why = refused
        dist = entry.source.name if entry.source.kind == "package" else None
        if kind == "test-double":
            self.problems.report(Problem(kind, str(entry.path), why, dist))
            return "refused (made by a test double)"
        if kind == "stale-artifact":
            self.problems.report(Problem(kind, str(entry.path), why, dist))
            return f"stale: {why}"
        own = refused if self.asked(entry) else refusal(kernel, artifact, entry.key, query)
        if own is None:
            winner = dict(artifact.winner.config)
            adapted = self.family.adapt(winner, key, query)
            if adapted is not None and self.family.check_config(adapted, key, query) is None:
                return self.neighbour(Found(entry, artifact, adapted, winner, distance))
            return f"{ROUTINE} ({self.decl.name}: {why})"
        # Reported for the artifact's own key, not the asked one: the problem is the
        # artifact's, so every row asked gives the same problem and it is logged once.
        self.problems.report(Problem(own[0], str(entry.path), f"{self.decl.name} refuses its winner for its own key "
                                     f"{dict(entry.key)} on {query.describe()}: {own[1]}", dist))
        return f"refused by {self.decl.name}: {why}"

    def neighbour(self, found: Found) -> Found | str:
        """``found``, unless it is a nearer key's winner the family passes over for the
        asked key (its optional ``pass_over_neighbour``): then why."""
        if self.asked(found.entry):
            return found
        why = self.family.pass_over(self.key, found.entry.key, found.config, self.query)
        return found if why is None else f"{ROUTINE} ({self.decl.name} passes it over: {why})"

    def asked(self, entry: Entry) -> bool:
        """Whether ``entry``'s key is the asked one as JSON: a relaxed axis may hold a
        value equal in Python but another key (``[1.0]`` for ``[1]``), a nearer key."""
        return canonical_text(entry.key) == self.text

    def last_problem(self, entry: Entry) -> str:
        for problem in reversed(self.problems.problems()):
            if problem.where == str(entry.path):
                return problem.kind
        return "unreadable"


