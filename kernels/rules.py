"""Validity rules a kernel family states once, for its check and its source alike.

A :class:`Rule` is a condition written in the part of the language that C++ and Python
share: integer names, integer literals, ``+ - * %``, the comparisons, and ``and``, ``or``
and ``not`` (standard C++ alternative tokens, which NVRTC and hipRTC accept).  The same
text is evaluated by :func:`broken` over the quantities a family computes from a config,
a key and a device, and emitted by :func:`static_asserts` as ``static_assert``s over the
source's own ``constexpr`` quantities of the same names.  So the declaration's check and
the compiled source cannot disagree about a rule: there is one text of it.

Division is not in the shared part (``/`` truncates in C++ and not in Python, ``//`` is
a comment in C++): a quantity that needs one is computed on each side and named.
This module imports neither torch nor a GPU runtime.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import CodeType

__all__ = ["Rule", "Rules", "broken", "static_asserts"]

_ALLOWED = (ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Mod,
            ast.Compare, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Name, ast.Load, ast.Constant)
_FIELD = re.compile(r"\{([A-Z_][A-Z0-9_]*)\}")


@dataclass(frozen=True)
class Rule:
    """One rule: ``holds`` must be true for a config to be valid.

    ``name`` identifies it (kebab-case); ``message`` says what is wrong when it fails and
    may name quantities as ``{NAME}`` (filled in by the check, left as the bare name in
    the source's assertion).  ``asserted``: the source asserts it at compile time
    (:func:`static_asserts` emits it); otherwise it is the family's own choice of what
    to run, checked by the declaration alone.  ``origin`` says where a rule the family
    does not own comes from (a compiler's or a language's limit)."""

    name: str
    holds: str
    message: str
    asserted: bool = True
    origin: str | None = None
    names: frozenset[str] = field(init=False, repr=False, compare=False)
    _tree: ast.expr = field(init=False, repr=False, compare=False)
    _code: CodeType = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        tree = ast.parse(self.holds, mode="eval").body
        names: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                names.add(node.id)
            if not isinstance(node, _ALLOWED):
                raise ValueError(f"rule {self.name!r}: {type(node).__name__} is not in the language C++ and Python share")
            if isinstance(node, ast.Constant) and type(node.value) is not int:
                raise ValueError(f"rule {self.name!r}: only integer literals, got {node.value!r}")
            if isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
                raise ValueError(f"rule {self.name!r}: only 'not' as a unary operator")
            if isinstance(node, ast.Compare) and len(node.ops) > 1:
                # ``a < b < c`` chains in Python and compares a bool in C++.
                raise ValueError(f"rule {self.name!r}: a chained comparison reads differently in C++")
        object.__setattr__(self, "names", frozenset(names))
        object.__setattr__(self, "_tree", tree)
        object.__setattr__(self, "_code", compile(ast.Expression(tree), f"<rule {self.name}>", "eval"))

    def holds_for(self, values: Mapping[str, int]) -> bool:
        """Whether the rule holds for ``values`` (every name it reads; ``KeyError`` else)."""
        return _holds(self._code, self.name, values)

    def cxx(self) -> str:
        """The condition as a C++ expression (fully parenthesized, see :func:`_cxx`)."""
        return _cxx(self._tree)

    def explain(self, values: Mapping[str, int]) -> str:
        """The message with the quantities it names filled in from ``values``."""
        return _FIELD.sub(lambda m: str(values[m.group(1)]), self.message)


_CXX_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Mod: "%"}
_CXX_COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def _cxx(node: ast.expr) -> str:
    """``node`` as C++, every operation parenthesized: C++'s ``not`` binds tighter than a
    comparison and Python's looser, so the text of a rule is never handed over as is."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant):
        return repr(node.value)  # an int: Rule admits no other literal
    if isinstance(node, ast.BoolOp):
        return "(" + (" and " if isinstance(node.op, ast.And) else " or ").join(_cxx(v) for v in node.values) + ")"
    if isinstance(node, ast.UnaryOp):
        return f"(not {_cxx(node.operand)})"
    if isinstance(node, ast.BinOp):
        return f"({_cxx(node.left)} {_CXX_BINARY[type(node.op)]} {_cxx(node.right)})"
    if isinstance(node, ast.Compare):
        return f"({_cxx(node.left)} {_CXX_COMPARE[type(node.ops[0])]} {_cxx(node.comparators[0])})"
    raise AssertionError(f"unchecked node {type(node).__name__}")


def _holds(code: CodeType, name: str, values: Mapping[str, int]) -> bool:
    # A rule's tree holds only the nodes Rule admits (names, int literals, + - * %, single
    # comparisons, and/or/not) and reads only ``values``: evaluating it needs nothing
    # else, and its integer arithmetic is C++'s for the non-negative quantities rules read.
    try:
        return bool(eval(code, {"__builtins__": {}}, values if isinstance(values, dict) else dict(values)))  # noqa: S307
    except NameError as exc:
        raise KeyError(f"{name} reads {exc.name!r}, which the quantities do not give") from None


class Rules(tuple[Rule, ...]):
    """A family's rules, in order, with the expression that holds when all of them do
    compiled once: checking a valid config (the common case, on the serving path) is one
    evaluation, not one per rule."""

    _all: CodeType

    def __new__(cls, rules: Sequence[Rule]) -> Rules:
        made = super().__new__(cls, rules)
        trees = [r._tree for r in made]
        tree = ast.BoolOp(op=ast.And(), values=trees) if len(trees) > 1 else trees[0] if trees else ast.Constant(1)
        made._all = compile(ast.fix_missing_locations(ast.Expression(tree)), "<rules>", "eval")
        return made


def broken(rules: Rules, values: Mapping[str, int]) -> str | None:
    """The first rule of ``rules`` that does not hold for ``values``, explained; ``None``
    when all hold.  ``KeyError`` when a rule reads a quantity ``values`` lacks."""
    if _holds(rules._all, "a rule", values):
        return None
    for rule in rules:
        if not rule.holds_for(values):
            return rule.explain(values)
    raise AssertionError("the rules failed together and none alone")  # pragma: no cover - `and` of them all


def static_asserts(rules: Sequence[Rule], indent: str = "") -> str:
    """The asserted rules as C++ ``static_assert`` lines, in order, each message
    ``"<name>: <message>"`` (quantities by name)."""
    lines = []
    for rule in rules:
        if rule.asserted:
            text = _FIELD.sub(lambda m: m.group(1), rule.message).replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'{indent}static_assert({rule.cxx()}, "{rule.name}: {text}");')
    return "\n".join(lines) + "\n"
