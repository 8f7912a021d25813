"""Read a launch script the way bash would, far enough to find the command line it runs.

Public surface: :func:`run_script` -> :class:`ScriptResult` (every simple command the script
would run, its words expanded, with the line each word came from), and the markers
:data:`UNSET` / :func:`unresolved_names` / :func:`defaulted_names` / :func:`plain`.

What is understood (what launch scripts of Megatron-LM, NeMo and clusters use):

* comments (``#`` at the start of a word, also inside ``( ... )`` arrays), line continuations,
  single / double quotes, backslash escapes;
* assignments ``NAME=value``, ``export`` / ``declare`` / ``local`` / ``readonly`` forms, bash
  arrays ``NAME=( ... )`` and ``NAME+=( ... )``, ``NAME+=value``;
* expansions ``$NAME``, ``${NAME}``, ``${NAME:-word}`` / ``${NAME-word}`` / ``${NAME:=word}``,
  ``${NAME[@]}`` / ``${NAME[*]}`` / ``${NAME[i]}``, arithmetic ``$(( ... ))``; word splitting
  of unquoted expansions (so ``"--fp8-format hybrid"`` in an array expanded unquoted is two
  words, as bash passes it);
* ``if`` / ``elif`` / ``else`` / ``fi`` with ``[ ... ]``, ``[[ ... ]]`` and ``test``
  conditions (``-z``, ``-n``, ``=``, ``==``, ``!=``, ``-eq`` ... ``-ge``, ``!``, ``&&``, ``||``);
  file tests (``-f``, ``-d``, ``-e``) are taken as true (the script ran where its files exist);
* ``bash -c '...'`` / ``sh -c '...'``: the quoted script is read in turn.

What is not (and how it shows): a variable the script never assigns — the environment, a
positional parameter ``$1``, a command substitution ``$(...)`` — expands to a marker naming it
(:data:`UNSET`), so that the caller can refuse a value it needs instead of guessing.
``${X:-default}`` with X never assigned gives the default, marked with X's name so that the
caller can say which defaults it relied on. Loops run their body once; functions and ``case``
bodies are skipped (their assignments stay unknown, hence marked, never silently wrong).
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field

UNSET = "\x00"  # \x00NAME\x00: a variable set outside the script
_DEF_OPEN, _DEF_MID, _DEF_CLOSE = "\x01", "\x02", "\x03"  # \x01NAME\x02value\x03: default used
_UNSET_RE = re.compile(r"\x00([^\x00]*)\x00")
_DEF_RE = re.compile(r"\x01([^\x02]*)\x02([^\x03]*)\x03")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=")
_KEYWORDS = {"then", "do", "done", "fi", "else", "elif", "if", "while", "until", "for", "case", "esac",
             "function", "{", "}", "!", "in"}
_DECLARE = {"export", "declare", "local", "readonly", "typeset"}


_NBSP = "\x04"  # spaces inside a marker (``$(cmd arg)``) must not split words


def _mark(name: str) -> str:
    return f"{UNSET}{name.replace(' ', _NBSP)}{UNSET}"


def unresolved_names(text: str) -> list[str]:
    """Names of the variables set outside the script that ``text`` depends on."""
    return [n.replace(_NBSP, " ") for n in _UNSET_RE.findall(text)]


def shown(text: str) -> str:
    """``text`` as a person reads it: markers back to ``$NAME``, defaults to their value."""
    text = _UNSET_RE.sub(lambda m: (m.group(1) if m.group(1).startswith("$") else "$" + m.group(1)).replace(_NBSP, " "),
                         text)
    return plain(text)


def defaulted_names(text: str) -> list[str]:
    """Names whose ``${NAME:-default}`` default ``text`` relies on."""
    return _DEF_RE.findall(text) and [m[0] for m in _DEF_RE.findall(text)]


def plain(text: str) -> str:
    """``text`` with the default markers removed (values kept); unresolved markers kept."""
    return _DEF_RE.sub(lambda m: m.group(2), text)


class ShellSyntaxError(ValueError):
    def __init__(self, message: str, line: int):
        super().__init__(message)
        self.line = line


# ------------------------------------------------------------------------------------- lexer
@dataclass
class Word:
    segs: list[tuple[str, str]]  # (kind, text): "lit" (no expansion), "plain" (unquoted), "dq"
    line: int

    @property
    def raw(self) -> str:
        return "".join(t for _, t in self.segs)

    @property
    def quoted(self) -> bool:
        return any(k != "plain" for k, _ in self.segs)


@dataclass
class Tok:
    kind: str  # "word", "sep" (; & && || | newline), "(", ")"
    value: object
    line: int


def _match_close(text: str, i: int, open_: str, close: str) -> int:
    """Index just after the ``close`` matching an ``open_`` already consumed before ``i``."""
    depth, n = 1, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            j = text.find("'", i + 1)
            i = n if j < 0 else j + 1
            continue
        if c == '"':
            i = _match_dq(text, i + 1)
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ShellSyntaxError(f"no closing {close!r}", 0)


def _match_dq(text: str, i: int) -> int:
    """Index just after the closing double quote of a string whose content starts at ``i``."""
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i + 1
        if c == "$" and text.startswith("$(", i):
            i = _match_close(text, i + 2, "(", ")")
            continue
        if c == "`":
            j = text.find("`", i + 1)
            i = n if j < 0 else j + 1
            continue
        i += 1
    raise ShellSyntaxError("unbalanced double quote", 0)


def _lex(text: str, line0: int = 1) -> list[Tok]:
    toks: list[Tok] = []
    i, n, line = 0, len(text), line0
    segs: list[tuple[str, str]] = []
    wline = line
    started = False

    def add(kind: str, s: str) -> None:
        nonlocal started, wline
        if not started:
            started, wline = True, line
        if segs and segs[-1][0] == kind:
            segs[-1] = (kind, segs[-1][1] + s)
        else:
            segs.append((kind, s))

    def end_word() -> None:
        nonlocal started, segs
        if started:
            toks.append(Tok("word", Word(segs, wline), wline))
        segs, started = [], False

    while i < n:
        c = text[i]
        if c == "\\":
            if i + 1 < n and text[i + 1] == "\n":
                i += 2
                line += 1
                continue
            if i + 1 < n:
                add("lit", text[i + 1])
            i += 2
            continue
        if c == "#" and not started:
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if c in " \t\r":
            end_word()
            i += 1
            continue
        if c == "\n":
            end_word()
            toks.append(Tok("sep", "\n", line))
            line += 1
            i += 1
            continue
        if c in ";&|":
            end_word()
            op = text[i:i + 2] if text[i:i + 2] in ("&&", "||", ";;") else c
            toks.append(Tok("sep", op, line))
            i += len(op)
            continue
        if c in "<>":
            # a redirection (2>&1, > file, < file): neither it nor its target is an argument
            if started and len(segs) == 1 and segs[0][0] == "plain" and segs[0][1].isdigit():
                segs, started = [], False
            end_word()
            j = i
            while j < n and text[j] in "<>&":
                j += 1
            while j < n and text[j] in " \t":
                j += 1
            while j < n and text[j] not in " \t\n;|&()":
                j += 1
            i = j
            continue
        if c == "'":
            j = text.find("'", i + 1)
            if j < 0:
                raise ShellSyntaxError("unbalanced single quote", line)
            s = text[i + 1:j]
            add("lit", s)
            line += s.count("\n")
            i = j + 1
            continue
        if c == '"':
            try:
                j = _match_dq(text, i + 1)
            except ShellSyntaxError:
                raise ShellSyntaxError("unbalanced double quote", line) from None
            s = text[i + 1:j - 1]
            if not started:
                started, wline = True, line
            segs.append(("dq", s))
            line += s.count("\n")
            i = j
            continue
        if c == "$" and i + 1 < n and text[i + 1] in "({":
            open_, close = text[i + 1], ")" if text[i + 1] == "(" else "}"
            try:
                j = _match_close(text, i + 2, open_, close)
            except ShellSyntaxError:
                raise ShellSyntaxError(f"unbalanced '${open_}'", line) from None
            s = text[i:j]
            add("plain", s)
            line += s.count("\n")
            i = j
            continue
        if c == "`":
            j = text.find("`", i + 1)
            if j < 0:
                raise ShellSyntaxError("unbalanced backquote", line)
            add("plain", "$(" + text[i + 1:j] + ")")
            line += text[i:j].count("\n")
            i = j + 1
            continue
        if c in "()":
            end_word()
            toks.append(Tok(c, c, line))
            i += 1
            continue
        add("plain", c)
        i += 1
    end_word()
    return toks


# ------------------------------------------------------------------------------------- expansion
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
        return self.vars[name] if name in self.vars else _mark(name)

    def _param(self, body: str, line: int) -> tuple[str, list[str] | None]:
        """Expand the inside of ``${...}``: (scalar text, or array elements)."""
        if body.startswith("#"):
            v = self.vars.get(body[1:].split("[")[0])
            if isinstance(v, list):
                return str(len(v)), None
            return (str(len(v)) if isinstance(v, str) else _mark(body)), None
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!])(\[([^\]]*)\])?(.*)$", body, re.S)
        if not m:
            return _mark(body), None
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
                    return _mark(f"{name}[{idx}]"), None
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
                default = "".join(p.text for p in self._expand_pieces(_unquote_word(word), line))
                if op.endswith("="):
                    self.vars[name] = default
                    return default, None
                return f"{_DEF_OPEN}{name}{_DEF_MID}{default}{_DEF_CLOSE}", None
        if rest.startswith(":+") or rest.startswith("+"):
            word = rest.split("+", 1)[1]
            if val:
                return "".join(p.text for p in self._expand_pieces(_unquote_word(word), line)), None
            return "", None
        if rest:
            return _mark(f"{name}{rest[:20]}"), None  # ${X%pat}, ${X/a/b}...: not evaluated
        if val is None:
            return _mark(name), None
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
                    buf += v if isinstance(v, str) else _mark(m.group(0))
                    i = m.end()
                    continue
                buf += c
                i += 1
                continue
            nxt = text[i + 1]
            val: str
            arr: list[str] | None = None
            if text.startswith("$((", i):
                j = _match_close(text, i + 3, "(", ")")
                if j < n and text[j] == ")":
                    expr = text[i + 3:j - 1]
                    j += 1
                else:
                    expr = None
                if expr is None:
                    val = _mark("$((...))")
                else:
                    val = self._arith_value(expr, line)
                i = j
            elif nxt == "(":
                j = _match_close(text, i + 2, "(", ")")
                cmd = text[i + 2:j - 1].strip().split()
                val = _mark(f"$({' '.join(cmd[:2])})")
                i = j
            elif nxt == "{":
                j = _match_close(text, i + 2, "{", "}")
                val, arr = self._param(text[i + 2:j - 1], line)
                i = j
            elif _NAME.match(text, i + 1):
                m = _NAME.match(text, i + 1)
                v = self._lookup(m.group(0), line)
                val = v[0] if isinstance(v, list) and v else (v if isinstance(v, str) else "")
                i = m.end()
            elif nxt.isdigit() or nxt in "@*#?$!":
                val = _mark(f"${nxt}")
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
            return _mark(names[0])
        defaults = [m[0] for m in _DEF_RE.findall(inner)]
        try:
            v = str(_arith(plain(inner).replace("$", "")))
        except (ValueError, SyntaxError, TypeError, RecursionError):
            return _mark(f"$(({expr.strip()[:30]}))")
        for d in defaults[:1]:
            return f"{_DEF_OPEN}{d}{_DEF_MID}{v}{_DEF_CLOSE}"
        return v

    def _expand_pieces(self, word: Word, line: int) -> list[_Piece]:
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
        for p in self._expand_pieces(word, word.line):
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


def _unquote_word(text: str) -> Word:
    toks = [t for t in _lex(text) if t.kind == "word"]
    if not toks:
        return Word([("lit", "")], 0)
    segs = [s for t in toks for s in t.value.segs]  # type: ignore[union-attr]
    return Word(segs, 0)


# ------------------------------------------------------------------------------------- interpreter
@dataclass
class ScriptResult:
    commands: list[tuple[list[str], list[int]]] = field(default_factory=list)  # words, their lines
    notes: list[str] = field(default_factory=list)


def run_script(text: str, line0: int = 1, shell: Shell | None = None, depth: int = 0) -> ScriptResult:
    """Run ``text`` symbolically; return every simple command with expanded words."""
    sh = shell or Shell()
    toks = _lex(text, line0)
    _Interp(sh, toks, depth).run()
    return ScriptResult(sh.commands, sh.notes)


class _Interp:
    def __init__(self, sh: Shell, toks: list[Tok], depth: int):
        self.sh, self.toks, self.depth = sh, toks, depth
        self.i = 0
        # stack of [active, taken_any, parent_active] per if-block; "skip" frames for functions/case
        self.stack: list[list] = []

    def active(self) -> bool:
        return all(f[0] for f in self.stack)

    def run(self) -> None:
        while self.i < len(self.toks):
            self.statement()

    def _words_until_sep(self) -> list[Tok]:
        out = []
        while self.i < len(self.toks) and self.toks[self.i].kind != "sep":
            out.append(self.toks[self.i])
            self.i += 1
        return out

    def statement(self) -> None:
        t = self.toks[self.i]
        if t.kind == "sep":
            self.i += 1
            return
        if t.kind == ")" or t.kind == "(":
            self.i += 1
            return
        w: Word = t.value  # type: ignore[assignment]
        raw = w.raw if not w.quoted else None
        # ---- control flow
        if raw in ("if", "elif"):
            self.i += 1
            cond_toks = []
            while self.i < len(self.toks):
                tk = self.toks[self.i]
                if tk.kind == "word" and not tk.value.quoted and tk.value.raw == "then":  # type: ignore[union-attr]
                    self.i += 1
                    break
                cond_toks.append(tk)
                self.i += 1
            if raw == "if":
                parent = self.active()
                val = self._cond(cond_toks, t.line) if parent else False
                self.stack.append([val, val])
            elif self.stack:
                f = self.stack[-1]
                self.stack.pop()
                parent = self.active()
                val = (not f[1]) and parent and self._cond(cond_toks, t.line)
                self.stack.append([val, f[1] or val])
            return
        if raw == "else":
            self.i += 1
            if self.stack:
                f = self.stack[-1]
                f[0] = not f[1]
                f[1] = True
            return
        if raw in ("fi", "done", "esac", "}"):
            self.i += 1
            if self.stack:
                self.stack.pop()
            return
        if raw in ("for", "while", "until"):
            words = self._words_until_sep()
            if raw == "for" and len(words) > 1 and words[1].kind == "word":
                name = words[1].value.raw  # type: ignore[union-attr]
                self.sh.vars[name] = _mark(name)
            self.stack.append([True, True])  # body once
            return
        if raw == "do" or raw == "then":
            self.i += 1
            return
        if raw == "case":
            self._skip_block("case", "esac")
            return
        if raw == "function" or (raw is not None and not _ASSIGN.match(raw) and self.i + 2 < len(self.toks)
                                  and self.toks[self.i + 1].kind == "(" and self.toks[self.i + 2].kind == ")"):
            self._skip_function()
            return
        if raw == "{":
            self.i += 1
            self.stack.append([True, True])
            return
        if raw == "!":
            self.i += 1
            return
        # ---- a simple command (possibly only assignments)
        words: list[Tok] = []
        while self.i < len(self.toks):
            tk = self.toks[self.i]
            if tk.kind == "sep":
                break
            if tk.kind == "(" and words and words[-1].kind == "word" and _ASSIGN.match(words[-1].value.raw) \
                    and words[-1].value.raw.endswith("="):  # type: ignore[union-attr]
                name_tok = words.pop()
                self.i += 1
                elems: list[Word] = []
                while self.i < len(self.toks) and self.toks[self.i].kind != ")":
                    if self.toks[self.i].kind == "word":
                        elems.append(self.toks[self.i].value)  # type: ignore[arg-type]
                    self.i += 1
                self.i += 1
                if self.active():
                    self._assign_array(name_tok.value, elems)  # type: ignore[arg-type]
                continue
            words.append(tk)
            self.i += 1
        if not self.active():
            return
        self._simple(words)

    def _skip_block(self, open_kw: str, close_kw: str) -> None:
        depth = 0
        while self.i < len(self.toks):
            tk = self.toks[self.i]
            self.i += 1
            if tk.kind == "word" and not tk.value.quoted:  # type: ignore[union-attr]
                if tk.value.raw == open_kw:  # type: ignore[union-attr]
                    depth += 1
                elif tk.value.raw == close_kw:  # type: ignore[union-attr]
                    depth -= 1
                    if depth <= 0:
                        return

    def _skip_function(self) -> None:
        depth = 0
        seen = False
        while self.i < len(self.toks):
            tk = self.toks[self.i]
            self.i += 1
            if tk.kind == "word" and not tk.value.quoted:  # type: ignore[union-attr]
                if tk.value.raw == "{":  # type: ignore[union-attr]
                    depth += 1
                    seen = True
                elif tk.value.raw == "}":  # type: ignore[union-attr]
                    depth -= 1
                    if seen and depth <= 0:
                        return

    def _assign_array(self, name_word: Word, elems: list[Word]) -> None:
        m = _ASSIGN.match(name_word.raw)
        assert m
        name, append = m.group(1), m.group(3) == "+"
        vals = [f for e in elems for f in self.sh.expand(e)]
        old = self.sh.vars.get(name)
        if append:
            base = old if isinstance(old, list) else ([old] if isinstance(old, str) and old else [])
            self.sh.vars[name] = base + vals
        else:
            self.sh.vars[name] = vals

    def _simple(self, toks: list[Tok]) -> None:
        words = [t.value for t in toks if t.kind == "word"]
        k = 0
        if words and not words[0].quoted and words[0].raw in _DECLARE:
            k = 1
            while k < len(words) and words[k].raw.startswith("-"):
                k += 1
            for w in words[k:]:
                self._assign_scalar(w) if _ASSIGN.match(w.raw) and w.segs[0][0] == "plain" else None
            return
        while k < len(words) and words[k].segs and words[k].segs[0][0] == "plain" and _ASSIGN.match(words[k].raw):
            self._assign_scalar(words[k])
            k += 1
        rest = words[k:]
        if not rest:
            return
        fields: list[str] = []
        lines: list[int] = []
        for w in rest:
            f = self.sh.expand(w)
            fields += f
            lines += [w.line] * len(f)
        if not fields:
            return
        # bash -c 'script': read the script too
        for j, f in enumerate(fields[:-1]):
            if f.rsplit("/", 1)[-1] in ("bash", "sh", "zsh") and fields[j + 1] == "-c" and j + 2 < len(fields) \
                    and self.depth < 3:
                run_script(fields[j + 2], line0=lines[j + 2], shell=self.sh, depth=self.depth + 1)
                return
        self.sh.commands.append((fields, lines))

    def _assign_scalar(self, w: Word) -> None:
        m = _ASSIGN.match(w.raw)
        assert m
        name, append = m.group(1), m.group(3) == "+"
        # value: the word with the "NAME=" prefix removed from its first segment
        prefix = len(m.group(0))
        segs = list(w.segs)
        kind, text = segs[0]
        segs[0] = (kind, text[prefix:])
        val_word = Word(segs, w.line)
        pieces = self.sh._expand_pieces(val_word, w.line)
        value = "".join(p.text for p in pieces)  # no word splitting in assignments
        if m.group(2):  # NAME[i]=v
            return
        old = self.sh.vars.get(name)
        if append and isinstance(old, list):
            old.append(value)
        elif append and isinstance(old, str):
            self.sh.vars[name] = old + value
        else:
            self.sh.vars[name] = value

    # -- conditions ------------------------------------------------------------------------
    def _cond(self, toks: list[Tok], line: int) -> bool:
        """Evaluate an if-condition; unknown parts are read as bash reads unset variables."""
        groups: list[tuple[str, list[str]]] = []
        op = "&&"
        cur: list[str] = []
        for tk in toks:
            if tk.kind == "sep" and tk.value in ("&&", "||"):
                groups.append((op, cur))
                op, cur = str(tk.value), []
            elif tk.kind == "sep":
                continue
            elif tk.kind == "word":
                cur += self.sh.expand(tk.value) or [""]  # type: ignore[arg-type]
        groups.append((op, cur))
        result: bool | None = None
        for op, words in groups:
            v = self._test(words, line)
            if result is None:
                result = v
            elif op == "&&":
                result = result and v
            else:
                result = result or v
        return bool(result)

    def _test(self, words: list[str], line: int) -> bool:
        w = [x for x in words if x not in ("[", "]", "[[", "]]", "test")]
        unknown = sorted({n for x in w for n in unresolved_names(x)})
        if unknown:
            self.sh.notes.append(f"line {line}: the condition depends on {', '.join(unknown)}, set outside the "
                                 "script: read as unset, as bash would without it")
        w = [_UNSET_RE.sub("", plain(x)) for x in w]
        neg = False
        while w and w[0] == "!":
            neg, w = not neg, w[1:]
        r: bool
        if len(w) == 1:
            r = w[0] != ""
        elif len(w) == 2 and w[0] in ("-z", "-n"):
            r = (w[1] == "") == (w[0] == "-z")
        elif len(w) == 2 and w[0] in ("-f", "-d", "-e", "-r", "-x", "-s"):
            r = True  # the script ran where its files exist
        elif len(w) == 3 and w[1] in ("=", "==", "!="):
            r = (w[0] == w[2]) == (w[1] != "!=")
        elif len(w) == 3 and w[1] in ("-eq", "-ne", "-lt", "-gt", "-le", "-ge"):
            try:
                a, b = int(w[0]), int(w[2])
                r = {"-eq": a == b, "-ne": a != b, "-lt": a < b, "-gt": a > b, "-le": a <= b, "-ge": a >= b}[w[1]]
            except ValueError:
                r = False
        else:
            r = False
        return r != neg
