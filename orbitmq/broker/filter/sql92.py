"""RocketMQ's SQL92 property-filter subset: tokenizer + recursive-descent parser compiling an expression into a
predicate over a message's properties dict (str -> str).

Supported: = <> != < <= > >=, [NOT] IN (...), [NOT] BETWEEN a AND b, IS [NOT] NULL, [NOT] CONTAINS / STARTSWITH /
ENDSWITH, AND / OR / NOT, parentheses, TRUE / FALSE / NULL, int / float literals (with sign), 'single quoted'
strings ('' escapes a quote). Keywords are case-insensitive. Evaluation follows RocketMQ's SqlFilter: a missing
property makes its comparison unknown (None), unknown counts as false at the top, AND short-circuits on unknown
left, OR / NOT propagate unknown. Two operands that both parse as numbers compare numerically, otherwise as strings.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Props = dict[str, str]
Predicate = Callable[[Props], bool]
_Tri = Callable[[Props], "bool | None"]
_Val = Callable[[Props], Any]

KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE",
                      "CONTAINS", "STARTSWITH", "ENDSWITH"})
_COMPARE_OPS = frozenset({"=", "<>", "!=", "<", "<=", ">", ">="})
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[lLdDfF]?)
  | (?P<str>'(?:[^']|'')*')
  | (?P<id>[A-Za-z_$][A-Za-z0-9_$.]*)
  | (?P<op><>|!=|<=|>=|=|<|>|\(|\)|,)
""", re.VERBOSE)


class SqlParseError(ValueError):
    """The expression is not valid SQL92 filter syntax (the message says where)."""


class SqlLimitError(SqlParseError):
    """The expression is valid-looking but over a limit (length, nesting depth, IN-list size)."""


@dataclass(frozen=True, slots=True)
class SqlLimits:
    """Bounds on a subscription expression (docs/design/security.md "Limits"); 0 turns one off. The length is in
    UTF-8 bytes; depth counts parentheses and NOTs; chains of AND / OR are flat (evaluated in a loop)."""

    max_length: int = 4096
    max_depth: int = 32
    max_in_list: int = 256


DEFAULT_LIMITS = SqlLimits()


class _Tok:
    __slots__ = ("kind", "text", "value", "pos")

    def __init__(self, kind: str, text: str, value: Any, pos: int) -> None:
        self.kind = kind  # "num", "str", "id", "kw", "op", "end"
        self.text = text
        self.value = value
        self.pos = pos


def _number(text: str) -> int | float:
    t = text.rstrip("lLdDfF")
    if any(c in t for c in ".eE"):
        return float(t)
    return int(t)


def tokenize(expr: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    n = len(expr)
    prev_value = False  # a sign directly after a value would be arithmetic, which the subset does not have
    while pos < n:
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise SqlParseError(f"unexpected character {expr[pos]!r} at position {pos}")
        kind = m.lastgroup or ""
        text = m.group()
        if kind == "num" and text[0] in "+-" and prev_value:
            raise SqlParseError(f"arithmetic is not supported (at position {pos})")
        if kind == "num":
            out.append(_Tok("num", text, _number(text), pos))
        elif kind == "str":
            out.append(_Tok("str", text, text[1:-1].replace("''", "'"), pos))
        elif kind == "id":
            up = text.upper()
            if up in KEYWORDS:
                out.append(_Tok("kw", up, up, pos))
            else:
                out.append(_Tok("id", text, text, pos))
        elif kind == "op":
            out.append(_Tok("op", text, text, pos))
        if kind != "ws":
            last = out[-1]
            prev_value = last.kind in ("num", "str", "id") or text == ")" or last.value in ("TRUE", "FALSE", "NULL")
        pos = m.end()
    out.append(_Tok("end", "", None, n))
    return out


def as_number(v: Any) -> int | float | None:
    """The numeric value of an operand (property values are strings), None if it is not a number."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return v
    try:
        return int(v)
    except (TypeError, ValueError):
        pass
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f else None  # NaN is not a number here


def _as_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return v if isinstance(v, str) else str(v)


def compare(op: str, lv: Any, rv: Any) -> bool | None:
    """RocketMQ-style comparison of two operand values; None (unknown) if either side is missing."""
    if lv is None or rv is None:
        return None
    if isinstance(lv, bool) or isinstance(rv, bool):
        if op not in ("=", "<>", "!="):
            return None
        eq = _as_text(lv).lower() == _as_text(rv).lower()
        return eq if op == "=" else not eq
    ln = as_number(lv)
    rn = as_number(rv)
    a: Any
    b: Any
    if ln is not None and rn is not None:
        a, b = ln, rn
    else:
        a, b = _as_text(lv), _as_text(rv)
    if op == "=":
        return a == b
    if op in ("<>", "!="):
        return a != b
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    return a >= b


class _Parser:
    def __init__(self, expr: str, limits: SqlLimits = DEFAULT_LIMITS) -> None:
        self.expr = expr
        self.limits = limits
        self.toks = tokenize(expr)
        self.i = 0
        self.depth = 0

    def _enter(self) -> None:
        self.depth += 1
        if self.limits.max_depth and self.depth > self.limits.max_depth:
            raise SqlLimitError(f"expression nests deeper than {self.limits.max_depth} levels "
                                f"(parentheses and NOT) at position {self.tok.pos}")

    # -- token helpers --
    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def _fail(self, what: str) -> SqlParseError:
        t = self.tok
        found = "end of expression" if t.kind == "end" else repr(t.text)
        return SqlParseError(f"{what}, found {found} at position {t.pos}")

    def _kw(self, word: str) -> bool:
        t = self.tok
        if t.kind == "kw" and t.value == word:
            self.i += 1
            return True
        return False

    def _op(self, op: str) -> bool:
        t = self.tok
        if t.kind == "op" and t.value == op:
            self.i += 1
            return True
        return False

    def _expect_op(self, op: str) -> None:
        if not self._op(op):
            raise self._fail(f"expected {op!r}")

    # -- grammar --
    def parse(self) -> _Tri:
        if self.tok.kind == "end":
            raise SqlParseError("empty expression")
        node = self._or()
        if self.tok.kind != "end":
            raise self._fail("unexpected token")
        return node

    def _or(self) -> _Tri:
        parts = [self._and()]
        while self._kw("OR"):
            parts.append(self._and())
        return parts[0] if len(parts) == 1 else _or(parts)

    def _and(self) -> _Tri:
        parts = [self._not()]
        while self._kw("AND"):
            parts.append(self._not())
        return parts[0] if len(parts) == 1 else _and(parts)

    def _not(self) -> _Tri:
        if self._kw("NOT"):
            self._enter()
            inner = _not(self._not())
            self.depth -= 1
            return inner
        return self._predicate()

    def _predicate(self) -> _Tri:
        if self._op("("):
            self._enter()
            inner = self._or()
            self._expect_op(")")
            self.depth -= 1
            return inner
        start = self.tok
        left = self._value()
        t = self.tok
        if t.kind == "op" and t.value in _COMPARE_OPS:
            self.i += 1
            right = self._value()
            return _cmp(t.value, left, right)
        if self._kw("IS"):
            negate = self._kw("NOT")
            if not self._kw("NULL"):
                raise self._fail("expected NULL after IS")
            return _is_null(left, negate)
        negate = self._kw("NOT")
        if self._kw("IN"):
            return _in(left, self._string_list(), negate)
        if self._kw("BETWEEN"):
            low = self._number_value()
            if not self._kw("AND"):
                raise self._fail("expected AND in BETWEEN")
            high = self._number_value()
            return _between(left, low, high, negate)
        for word in ("CONTAINS", "STARTSWITH", "ENDSWITH"):
            if self._kw(word):
                return _text_op(word, left, self._string_value(), negate)
        if negate:
            raise self._fail("expected IN, BETWEEN, CONTAINS, STARTSWITH or ENDSWITH after NOT")
        if start.kind == "kw" and start.value in ("TRUE", "FALSE"):
            const = start.value == "TRUE"
            return lambda _p: const
        raise self._fail(f"expected a comparison after {start.text!r}")

    def _value(self) -> _Val:
        t = self.tok
        if t.kind == "id":
            self.i += 1
            name = t.value
            return lambda p: p.get(name)
        if t.kind in ("num", "str"):
            self.i += 1
            v = t.value
            return lambda _p: v
        if t.kind == "kw" and t.value in ("TRUE", "FALSE", "NULL"):
            self.i += 1
            c = None if t.value == "NULL" else t.value == "TRUE"
            return lambda _p: c
        raise self._fail("expected a property name or a literal")

    def _number_value(self) -> int | float:
        t = self.tok
        if t.kind != "num":
            raise self._fail("expected a number")
        self.i += 1
        return t.value  # type: ignore[no-any-return]

    def _string_value(self) -> str:
        t = self.tok
        if t.kind != "str":
            raise self._fail("expected a string literal")
        self.i += 1
        return t.value  # type: ignore[no-any-return]

    def _string_list(self) -> frozenset[str]:
        self._expect_op("(")
        items = [self._string_value()]
        cap = self.limits.max_in_list
        while self._op(","):
            if cap and len(items) >= cap:
                raise SqlLimitError(f"IN list longer than {cap} items at position {self.tok.pos}")
            items.append(self._string_value())
        self._expect_op(")")
        return frozenset(items)


# ---- node builders (closures: evaluation is a few Python calls per node) ----
def _and(parts: list[_Tri]) -> _Tri:
    """a AND b AND c ... as ((a AND b) AND c): unknown or false on the left -> false (RocketMQ); the last
    operand's value (true or unknown) otherwise. A loop, not nested closures: a long chain costs no stack."""
    head, last = tuple(parts[:-1]), parts[-1]

    def f(p: Props) -> bool | None:
        for part in head:
            if not part(p):
                return False
        return last(p)
    return f


def _or(parts: list[_Tri]) -> _Tri:
    """a OR b OR c ...: true as soon as one is true; else the last operand's value (false or unknown)."""
    head, last = tuple(parts[:-1]), parts[-1]

    def f(p: Props) -> bool | None:
        for part in head:
            if part(p):
                return True
        return last(p)
    return f


def _not(inner: _Tri) -> _Tri:
    def f(p: Props) -> bool | None:
        v = inner(p)
        return None if v is None else not v
    return f


def _cmp(op: str, left: _Val, right: _Val) -> _Tri:
    return lambda p: compare(op, left(p), right(p))


def _is_null(operand: _Val, negate: bool) -> _Tri:
    if negate:
        return lambda p: operand(p) is not None
    return lambda p: operand(p) is None


def _in(operand: _Val, items: frozenset[str], negate: bool) -> _Tri:
    def f(p: Props) -> bool | None:
        v = operand(p)
        if v is None:
            return None
        return (_as_text(v) in items) != negate
    return f


def _between(operand: _Val, low: float, high: float, negate: bool) -> _Tri:
    def f(p: Props) -> bool | None:
        n = as_number(operand(p))
        if n is None:
            return None
        inside = low <= n <= high
        return inside != negate
    return f


def _text_op(word: str, operand: _Val, arg: str, negate: bool) -> _Tri:
    def f(p: Props) -> bool | None:
        v = operand(p)
        if v is None:
            return None
        s = _as_text(v)
        hit = arg in s if word == "CONTAINS" else s.startswith(arg) if word == "STARTSWITH" else s.endswith(arg)
        return hit != negate
    return f


def compile_sql92(expression: str, limits: SqlLimits = DEFAULT_LIMITS) -> Predicate:
    """Compile an SQL92 filter expression; raises SqlParseError with a readable reason (SqlLimitError when the
    expression is over one of `limits`; the length is checked before any parsing)."""
    if expression is None or not expression.strip():
        raise SqlParseError("empty expression")
    if limits.max_length and len(expression) > limits.max_length // 4:  # cheap pre-check; exact count next
        size = len(expression.encode("utf-8", "surrogatepass"))
        if size > limits.max_length:
            raise SqlLimitError(f"expression is {size} bytes, over the limit of {limits.max_length}")
    tri = _Parser(expression, limits).parse()

    def predicate(props: Props) -> bool:
        return tri(props) is True

    return predicate


def evaluate(expression: str, props: Props) -> bool:
    """Compile and evaluate once (tests, tools); the broker caches compiled predicates instead."""
    return compile_sql92(expression)(props)
