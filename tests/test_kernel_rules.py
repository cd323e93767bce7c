"""Rules written once in the language C++ and Python share: what the language admits,
how a rule reads in each, and how a family's check reports the first one broken."""

from __future__ import annotations

import pytest

from flyconfigs.kernels.rules import Rule, Rules, broken, static_asserts


@pytest.mark.parametrize(("holds", "why"), [
    ("N / VEC == 2", "Div"),
    ("N // VEC == 2", "FloorDiv"),
    ("N < TPR < 8", "chained"),
    ("N == 1.5", "integer literals"),
    ("N == True", "integer literals"),
    ("-N < 0", "only 'not'"),
    ("f(N) == 1", "Call"),
    ("N if TPR else 1", "IfExp"),
])
def test_a_rule_outside_the_shared_language_is_refused_when_declared(holds: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        Rule("bad", holds, "never")


def test_python_and_cxx_read_not_the_same_way_so_the_cxx_text_is_parenthesized() -> None:
    # In C++ "not N == 0" is "(not N) == 0"; in Python "not (N == 0)".  The emitted
    # assertion says what Python evaluates.
    rule = Rule("nonzero", "not N == 0 or TPR % 32 + 1 == 1", "N is {N}")
    assert rule.cxx() == "((not (N == 0)) or (((TPR % 32) + 1) == 1))"
    assert rule.holds_for({"N": 5, "TPR": 7}) and not rule.holds_for({"N": 0, "TPR": 7})
    assert rule.holds_for({"N": 0, "TPR": 64})


def test_broken_names_the_first_rule_that_fails_with_its_quantities() -> None:
    rules = Rules((
        Rule("divides", "N % VEC == 0", "a vector of {VEC} does not divide {N}"),
        Rule("small", "N <= 64", "{N} is too long", asserted=False),
    ))
    assert broken(rules, {"N": 64, "VEC": 8}) is None
    assert broken(rules, {"N": 100, "VEC": 8}) == "a vector of 8 does not divide 100"
    assert broken(rules, {"N": 128, "VEC": 8}) == "128 is too long"
    with pytest.raises(KeyError, match="VEC"):
        broken(rules, {"N": 100})


def test_only_asserted_rules_become_static_asserts_with_their_names() -> None:
    rules = Rules((
        Rule("divides", "N % VEC == 0", 'a vector of {VEC} does not divide "{N}"'),
        Rule("small", "N <= 64", "too long", asserted=False),
    ))
    assert static_asserts(rules, "  ") == (
        '  static_assert(((N % VEC) == 0), "divides: a vector of VEC does not divide \\"N\\"");\n')
