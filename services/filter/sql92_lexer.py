"""Tokens of RocketMQ's SQL92 selector language, read lazily from the text.

Owns the lexical rules of RocketMQ's `SelectorParser.jj` (JavaCC) and the
parse-error helper every SQL92 module uses. It does not know the grammar
(sql92_parser.py) or what tokens mean at evaluation time (sql92_values.py).

The lexer is lazy on purpose: JavaCC only reads the tokens the parser asks
for, so RocketMQ never sees a lexical error in text after a complete
expression. Reading on demand lets the parser reproduce that exactly when it
runs in RocketMQ-compatible mode (see `sql92.compile(ignore_trailing=True)`).

Rules, as the JavaCC token manager implements them:
- whitespace is only space, \\t, \\n, \\r, \\f;
- `-- ...` is a comment only if a newline ends it; without one, `--` is two
  minus signs (the parser retries with comment-to-end-of-text, see parser);
- `/* ... */` is a comment; an unterminated one is an error;
- longest match wins, keywords beat identifiers of the same length;
- identifiers are ASCII only: [A-Za-z_$][A-Za-z0-9_$]*.
"""

import re

from quiver.errors import SubscriptionParseError

KEYWORDS = frozenset(
    "NOT AND OR BETWEEN IN TRUE FALSE NULL IS CONTAINS STARTSWITH ENDSWITH".split()
)

# Token kinds besides the keywords (which are their own upper-case kind).
INT, FLOAT, STRING, ID, EOF = "INT", "FLOAT", "STRING", "ID", "EOF"

_WHITESPACE = " \t\n\r\f"
_FLOAT_RE = re.compile(
    r"(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"
)
# "0" takes no L suffix in the grammar: "0L" is the literal 0 followed by L.
_DECIMAL_RE = re.compile(r"0|[1-9][0-9]*[lL]?")
_STRING_RE = re.compile(r"'(?:''|[^'])*'")
_ID_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_BLOCK_COMMENT_RE = re.compile(r"/\*[^*]*\*+(?:[^/*][^*]*\*+)*/")
_NEWLINE_RE = re.compile(r"[\r\n]")
_PUNCT = {"=": "=", "(": "(", ")": ")", ",": ",", "+": "+", "-": "-"}


class Token:
    """One token: its kind, its source text and its 0-based start offset."""

    __slots__ = ("kind", "text", "pos")

    def __init__(self, kind: str, text: str, pos: int):
        self.kind = kind
        self.text = text
        self.pos = pos

    def __repr__(self) -> str:
        return f"Token({self.kind}, {self.text!r}, {self.pos})"


def parse_error(source: str, pos: int, problem: str, hint: str = "") -> SubscriptionParseError:
    """Build the error a bad expression raises, pointing at `pos` (0-based).

    The message says where (1-based column, and line if the text has several)
    so a human can find it; `.position` lets a CLI draw a caret under it.
    """
    line = source.count("\n", 0, pos) + 1
    column = pos - (source.rfind("\n", 0, pos) + 1) + 1
    where = f"at column {column}" if "\n" not in source else f"at line {line}, column {column}"
    message = f"{problem} {where}" + (f": {hint}" if hint else "")
    err = SubscriptionParseError(message)
    err.position = pos
    err.expression = source
    return err


def show(text: str, limit: int = 32) -> str:
    """Quote a piece of the source for a message, shortened if long."""
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    if not text.isprintable():
        return repr(text)
    if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
        return text  # a string literal is already quoted
    return f"'{text}'"


class Lexer:
    """Hands out tokens one at a time; `next_token()` returns EOF forever at the end.

    `eof_comments=True` lets a `--` comment run to the end of the text when no
    newline follows it (the parser's second try, see sql92_parser.parse).
    """

    def __init__(self, source: str, eof_comments: bool = False):
        self.source = source
        self.eof_comments = eof_comments
        self.pos = 0

    def next_token(self) -> Token:
        src = self.source
        self._skip_blanks_and_comments()
        i = self.pos
        if i >= len(src):
            return Token(EOF, "", i)
        c = src[i]
        if c == "'":
            m = _STRING_RE.match(src, i)
            if m is None:
                raise parse_error(src, i, "unterminated string literal", "close it with '")
            return self._take(STRING, m.end())
        if c.isdigit() and c.isascii() or c == ".":
            return self._number(i)
        if c.isascii() and (c.isalpha() or c in "_$"):
            end = _ID_RE.match(src, i).end()
            word = src[i:end].upper()
            return self._take(word if word in KEYWORDS else ID, end)
        if c in "<>":
            two = src[i : i + 2]
            if two in ("<>", "<=", ">="):
                return self._take(two, i + 2)
            return self._take(c, i + 1)
        if c in _PUNCT:
            return self._take(c, i + 1)
        raise parse_error(src, i, f"unexpected character {show(c)}")

    def _take(self, kind: str, end: int) -> Token:
        tok = Token(kind, self.source[self.pos : end], self.pos)
        self.pos = end
        return tok

    def _number(self, i: int) -> Token:
        src = self.source
        f = _FLOAT_RE.match(src, i)
        d = _DECIMAL_RE.match(src, i)
        f_end = f.end() if f else -1
        d_end = d.end() if d else -1
        if f_end < 0 and d_end < 0:  # a '.' not followed by a digit
            raise parse_error(src, i, f"unexpected character {show(src[i])}")
        return self._take(FLOAT, f_end) if f_end > d_end else self._take(INT, d_end)

    def _skip_blanks_and_comments(self) -> None:
        src, n = self.source, len(self.source)
        i = self.pos
        while i < n:
            c = src[i]
            if c in _WHITESPACE:
                i += 1
            elif src.startswith("--", i):
                nl = _NEWLINE_RE.search(src, i)
                if nl is not None:
                    # The JavaCC pattern takes "\r\n" as one line end.
                    i = nl.end() + (1 if src.startswith("\r\n", nl.start()) else 0)
                elif self.eof_comments:
                    i = n
                else:
                    break  # RocketMQ reads these as two '-' tokens
            elif src.startswith("/*", i):
                m = _BLOCK_COMMENT_RE.match(src, i)
                if m is None:
                    self.pos = i
                    raise parse_error(src, i, "unterminated comment", "close it with */")
                i = m.end()
            else:
                break
        self.pos = i
