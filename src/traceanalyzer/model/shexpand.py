"""Expansion of a launch script's words: the variables assigned so far, ``$NAME`` / ``${...}``
forms, arithmetic, and word splitting of unquoted expansions (:class:`Shell`).
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass

from traceanalyzer.model.shlexer import Word, lex, match_close
from traceanalyzer.model.shmarks import DEF_CLOSE, DEF_MID, DEF_OPEN, DEF_RE, mark, plain, unresolved_names

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_ARITH_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
              ast.FloorDiv: operator.floordiv, ast.Div: operator.floordiv, ast.Mod: operator.mod}


def _arith(expr: str) -> int:
    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH_OPS:
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and b == 0:
                raise ValueError("division by zero")
            if isinstance(node.op, (ast.Div, ast.FloorDiv)):
                q = abs(a) // abs(b)  # bash truncates toward zero
                return q if (a >= 0) == (b >= 0) else -q
            return _ARITH_OPS[type(node.op)](a, b)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        raise ValueError("unsupported arithmetic")

    if len(expr) > 200:
        raise ValueError("expression too long")
    return ev(ast.parse(expr.replace("/", "//").replace("////", "//"), mode="eval"))


@dataclass
class _Piece:
    text: str
    split: bool  # result of an unquoted expansion: subject to word splitting
    array: list[str] | None = None  # "${A[@]}" in double quotes: one word per element


class Shell:
    """Variables and the commands run so far."""

    def __init__(self) -> None:
        self.vars: dict[str, str | list[str]] = {}
        self.commands: list[tuple[list[str], list[int]]] = []
        self.notes: list[str] = []

    # -- expansion of one $-form ---------------------------------------------------------
    def _lookup(self, name: str, line: int) -> str | list[str]:
        return self.vars[name] if name in self.vars else mark(name)

    def _param(self, body: str, line: int) -> tuple[str, list[str] | None]:
        """Expand the inside of ``${...}``: (scalar text, or array elements)."""
        if body.startswith("#"):
            v = self.vars.get(body[1:].split("[")[0])
            if isinstance(v, list):
                return str(len(v)), None
            return (str(len(v)) if isinstance(v, str) else mark(body)), None
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!])(\[([^\]]*)\])?(.*)$", body, re.S)
        if not m:
            return mark(body), None
        name, idx, rest = m.group(1), m.group(3), m.group(4)
        val = self.vars.get(name)
        if idx is not None:
            if isinstance(val, list):
                if idx in ("@", "*"):
                    return " ".join(val), list(val)
                try:
                    k = int(_arith(self._expand_text(idx, line, arith=True)))
                    return (val[k] if -len(val) <= k < len(val) else ""), None
                except ValueError:
                    return mark(f"{name}[{idx}]"), None
            if isinstance(val, str):
                return (val if idx in ("@", "*", "0") else ""), ([val] if idx in ("@", "*") else None)
            val = None
        elif isinstance(val, list):
            val = val[0] if val else ""
        for op in (":-", ":=", "-", "="):
            if rest.startswith(op):
                word = rest[len(op):]
                unset = val is None or (op.startswith(":") and val == "")
                if not unset:
                    return val, None
                default = "".join(p.text for p in self.expand_pieces(unquote_word(word), line))
                if op.endswith("="):
                    self.vars[name] = default
                    return default, None
                return f"{DEF_OPEN}{name}{DEF_MID}{default}{DEF_CLOSE}", None
        if rest.startswith(":+") or rest.startswith("+"):
            word = rest.split("+", 1)[1]
            if val:
                return "".join(p.text for p in self.expand_pieces(unquote_word(word), line)), None
            return "", None
        if rest:
            return mark(f"{name}{rest[:20]}"), None  # ${X%pat}, ${X/a/b}...: not evaluated
        if val is None:
            return mark(name), None
        return val, None

    def _expand_text(self, text: str, line: int, arith: bool = False) -> str:
        return "".join(p.text for p in self._scan(text, line, split=False, arith=arith))

    def _scan(self, text: str, line: int, split: bool, arith: bool = False) -> list[_Piece]:
        """Expand every $-form of ``text``; literal text is not split, expansions are if ``split``."""
        out: list[_Piece] = []
        i, n = 0, len(text)
        buf = ""
        while i < n:
            c = text[i]
            if c == "\\" and i + 1 < n and not split:  # inside double quotes
                nxt = text[i + 1]
                buf += nxt if nxt in '$`"\\' else "\\" + nxt if nxt != "\n" else ""
                i += 2
                continue
            if c != "$" or i + 1 >= n:
                if arith and _NAME.match(text, i):
                    m = _NAME.match(text, i)
                    v = self.vars.get(m.group(0))
                    buf += v if isinstance(v, str) else mark(m.group(0))
                    i = m.end()
                    continue
                buf += c
                i += 1
                continue
            nxt = text[i + 1]
            val: str
            arr: list[str] | None = None
            if text.startswith("$((", i):
                j = match_close(text, i + 3, "(", ")")
                if j < n and text[j] == ")":
                    expr = text[i + 3:j - 1]
                    j += 1
                else:
                    expr = None
                if expr is None:
                    val = mark("$((...))")
                else:
                    val = self._arith_value(expr, line)
                i = j
            elif nxt == "(":
                j = match_close(text, i + 2, "(", ")")
                cmd = text[i + 2:j - 1].strip().split()
                val = mark(f"$({' '.join(cmd[:2])})")
                i = j
            elif nxt == "{":
                j = match_close(text, i + 2, "{", "}")
                val, arr = self._param(text[i + 2:j - 1], line)
                i = j
            elif _NAME.match(text, i + 1):
                m = _NAME.match(text, i + 1)
                v = self._lookup(m.group(0), line)
                val = v[0] if isinstance(v, list) and v else (v if isinstance(v, str) else "")
                i = m.end()
            elif nxt.isdigit() or nxt in "@*#?$!":
                val = mark(f"${nxt}")
                i += 2
            else:
                buf += c
                i += 1
                continue
            if buf:
                out.append(_Piece(buf, False))
                buf = ""
            out.append(_Piece(val, split, arr if arr is not None and not split else None))
            if arr is not None and split:
                out[-1] = _Piece(" ".join(arr), True)
        if buf:
            out.append(_Piece(buf, False))
        return out

    def _arith_value(self, expr: str, line: int) -> str:
        inner = self._expand_text(expr, line, arith=True)
        names = unresolved_names(inner)
        if names:
            return mark(names[0])
        defaults = [m[0] for m in DEF_RE.findall(inner)]
        try:
            v = str(_arith(plain(inner).replace("$", "")))
        except (ValueError, SyntaxError, TypeError, RecursionError):
            return mark(f"$(({expr.strip()[:30]}))")
        if defaults:
            return f"{DEF_OPEN}{defaults[0]}{DEF_MID}{v}{DEF_CLOSE}"
        return v

    def expand_pieces(self, word: Word, line: int) -> list[_Piece]:
        pieces: list[_Piece] = []
        for kind, text in word.segs:
            if kind == "lit":
                pieces.append(_Piece(text, False))
            elif kind == "dq":
                pieces += self._scan(text, line, split=False)
            else:
                pieces += self._scan(text, line, split=True)
        return pieces

    def expand(self, word: Word) -> list[str]:
        """The fields bash would make of ``word``."""
        fields: list[str] = []
        cur: str | None = None  # None: no field open
        for p in self.expand_pieces(word, word.line):
            if p.array is not None:
                for k, el in enumerate(p.array):
                    if k == 0:
                        cur = (cur or "") + el
                    else:
                        fields.append(cur or "")
                        cur = el
                continue
            if not p.split:
                cur = (cur or "") + p.text
                continue
            parts = p.text.split()
            if not parts:
                continue
            if p.text[:1].isspace() and cur is not None:
                fields.append(cur)
                cur = None
            for k, part in enumerate(parts):
                if k == 0:
                    cur = (cur or "") + part
                else:
                    fields.append(cur or "")
                    cur = part
            if p.text[-1:].isspace():
                fields.append(cur or "")
                cur = None
        if cur is not None:
            fields.append(cur)
        if not fields and word.quoted:
            fields = [""]
        return fields


def unquote_word(text: str) -> Word:
    toks = [t for t in lex(text) if t.kind == "word"]
    if not toks:
        return Word([("lit", "")], 0)
    segs = [s for t in toks for s in t.value.segs]  # type: ignore[union-attr]
    return Word(segs, 0)

