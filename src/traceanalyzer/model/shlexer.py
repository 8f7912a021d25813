"""The words and separators of a launch script, as bash splits them: quotes, escapes, line
continuations, comments, ``$(...)`` / ``${...}`` / backquotes kept whole, redirections dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

class ShellSyntaxError(ValueError):
    def __init__(self, message: str, line: int):
        super().__init__(message)
        self.line = line


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


def _skip_literal(text: str, i: int, quote: str) -> int | None:
    """Index just after a backslash escape or a ``quote``-quoted run starting at ``i`` (the end
    of ``text`` when the quote never closes); None when neither starts there."""
    c = text[i]
    if c == "\\":
        return i + 2
    if c == quote:
        j = text.find(quote, i + 1)
        return len(text) if j < 0 else j + 1
    return None


def match_close(text: str, i: int, open_: str, close: str) -> int:
    """Index just after the ``close`` matching an ``open_`` already consumed before ``i``."""
    depth, n = 1, len(text)
    while i < n:
        if (after := _skip_literal(text, i, "'")) is not None:
            i = after
            continue
        c = text[i]
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
        if (after := _skip_literal(text, i, "`")) is not None:
            i = after
            continue
        if text[i] == '"':
            return i + 1
        if text.startswith("$(", i):
            i = match_close(text, i + 2, "(", ")")
            continue
        i += 1
    raise ShellSyntaxError("unbalanced double quote", 0)


def lex(text: str, line0: int = 1) -> list[Tok]:
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

    def closing(quote: str, what: str) -> int:
        """Index of the ``quote`` closing the one at ``i``."""
        j = text.find(quote, i + 1)
        if j < 0:
            raise ShellSyntaxError(f"unbalanced {what}", line)
        return j

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
            j = closing("'", "single quote")
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
                j = match_close(text, i + 2, open_, close)
            except ShellSyntaxError:
                raise ShellSyntaxError(f"unbalanced '${open_}'", line) from None
            s = text[i:j]
            add("plain", s)
            line += s.count("\n")
            i = j
            continue
        if c == "`":
            j = closing("`", "backquote")
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

