"""Read a launch script the way bash would, far enough to find the command line it runs.

Public surface: :func:`run_script` -> :class:`ScriptResult` (every simple command the script
would run, its words expanded, with the line each word came from), and the markers
:data:`UNSET` / :func:`unresolved_names` / :func:`defaulted_names` / :func:`plain`. This module
runs the statements; the words come from :mod:`.shlexer`, their expansion from :mod:`.shexpand`,
the markers from :mod:`.shmarks`.

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

import re
from dataclasses import dataclass, field

from traceanalyzer.model.shexpand import Shell
from traceanalyzer.model.shlexer import ShellSyntaxError, Tok, Word, lex
from traceanalyzer.model.shmarks import UNSET, UNSET_RE, defaulted_names, mark, plain, shown, unresolved_names

__all__ = ["UNSET", "ScriptResult", "Shell", "ShellSyntaxError", "defaulted_names", "plain", "run_script", "shown", "unresolved_names"]

_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=")
_DECLARE = {"export", "declare", "local", "readonly", "typeset"}


@dataclass
class ScriptResult:
    commands: list[tuple[list[str], list[int]]] = field(default_factory=list)  # words, their lines
    notes: list[str] = field(default_factory=list)


def run_script(text: str, line0: int = 1, shell: Shell | None = None, depth: int = 0) -> ScriptResult:
    """Run ``text`` symbolically; return every simple command with expanded words."""
    sh = shell or Shell()
    toks = lex(text, line0)
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
                self.sh.vars[name] = mark(name)
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
        pieces = self.sh.expand_pieces(val_word, w.line)
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
        w = [UNSET_RE.sub("", plain(x)) for x in w]
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
