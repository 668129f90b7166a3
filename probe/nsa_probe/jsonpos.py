"""JSON with positions: a strict parser that remembers where each value and key stands.

`parse(text)` returns a tree of `Node`s (value, line, col; objects keep their keys' positions)
or raises `JsonError(line, col, message)`. Duplicate keys are an error (as in the harness's
scenario loader). Lines and columns are 1-based; columns count characters.
"""


class JsonError(Exception):
    def __init__(self, line, col, msg):
        Exception.__init__(self, msg)
        self.line, self.col, self.msg = line, col, msg


class Node:
    __slots__ = ("value", "line", "col", "keys")

    def __init__(self, value, line, col, keys=None):
        self.value, self.line, self.col, self.keys = value, line, col, keys  # keys: name -> (line, col)

    def plain(self):
        """The value as plain Python (dict/list/str/int/float/bool/None)."""
        if isinstance(self.value, dict):
            return {k: v.plain() for k, v in self.value.items()}
        if isinstance(self.value, list):
            return [v.plain() for v in self.value]
        return self.value


_ESC = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class _Parser:
    def __init__(self, text):
        self.s, self.i, self.n = text, 0, len(text)
        self.line_starts = [0]
        for k, ch in enumerate(text):
            if ch == "\n":
                self.line_starts.append(k + 1)

    def pos(self, i=None):
        i = self.i if i is None else i
        lo, hi = 0, len(self.line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.line_starts[mid] <= i:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, i - self.line_starts[lo] + 1

    def fail(self, msg, i=None):
        line, col = self.pos(i)
        raise JsonError(line, col, msg)

    def ws(self):
        while self.i < self.n and self.s[self.i] in " \t\r\n":
            self.i += 1

    def value(self):
        self.ws()
        if self.i >= self.n:
            self.fail("unexpected end of file: expected a value")
        c, start = self.s[self.i], self.i
        line, col = self.pos()
        if c == "{":
            return self.obj(line, col)
        if c == "[":
            return self.arr(line, col)
        if c == '"':
            return Node(self.string(), line, col)
        for word, val in (("true", True), ("false", False), ("null", None)):
            if self.s.startswith(word, self.i):
                self.i += len(word)
                return Node(val, line, col)
        if c == "-" or c.isdigit():
            return Node(self.number(), line, col)
        self.fail("unexpected character %r: expected a value" % c, start)

    def number(self):
        start = self.i
        if self.s[self.i] == "-":
            self.i += 1
        digits = self.i
        while self.i < self.n and self.s[self.i].isdigit():
            self.i += 1
        if self.i == digits:
            self.fail("invalid number", start)
        if self.s[digits] == "0" and self.i - digits > 1:
            self.fail("invalid number: leading zero", start)
        real = False
        if self.i < self.n and self.s[self.i] == ".":
            real, self.i = True, self.i + 1
            d = self.i
            while self.i < self.n and self.s[self.i].isdigit():
                self.i += 1
            if self.i == d:
                self.fail("invalid number: digits expected after '.'", start)
        if self.i < self.n and self.s[self.i] in "eE":
            real, self.i = True, self.i + 1
            if self.i < self.n and self.s[self.i] in "+-":
                self.i += 1
            d = self.i
            while self.i < self.n and self.s[self.i].isdigit():
                self.i += 1
            if self.i == d:
                self.fail("invalid number: digits expected in the exponent", start)
        text = self.s[start:self.i]
        return float(text) if real else int(text)

    def string(self):
        start = self.i
        self.i += 1
        out = []
        while True:
            if self.i >= self.n:
                self.fail("unterminated string", start)
            c = self.s[self.i]
            if c == '"':
                self.i += 1
                return "".join(out)
            if c == "\\":
                if self.i + 1 >= self.n:
                    self.fail("unterminated string", start)
                e = self.s[self.i + 1]
                if e in _ESC:
                    out.append(_ESC[e])
                    self.i += 2
                elif e == "u":
                    h = self.s[self.i + 2:self.i + 6]
                    if len(h) != 4 or any(ch not in "0123456789abcdefABCDEF" for ch in h):
                        self.fail("invalid \\u escape", self.i)
                    out.append(chr(int(h, 16)))
                    self.i += 6
                else:
                    self.fail("invalid escape \\%s" % e, self.i)
            elif ord(c) < 0x20:
                self.fail("control character in a string", self.i)
            else:
                out.append(c)
                self.i += 1

    def obj(self, line, col):
        self.i += 1
        vals, keys = {}, {}
        self.ws()
        if self.i < self.n and self.s[self.i] == "}":
            self.i += 1
            return Node(vals, line, col, keys)
        while True:
            self.ws()
            if self.i >= self.n or self.s[self.i] != '"':
                self.fail("expected a key (a string) in the object")
            kl, kc = self.pos()
            k = self.string()
            if k in vals:
                self.fail("duplicate key '%s'" % k, self.line_starts[kl - 1] + kc - 1)
            self.ws()
            if self.i >= self.n or self.s[self.i] != ":":
                self.fail("expected ':' after the key '%s'" % k)
            self.i += 1
            vals[k] = self.value()
            keys[k] = (kl, kc)
            self.ws()
            if self.i < self.n and self.s[self.i] == ",":
                self.i += 1
                self.ws()
                if self.i < self.n and self.s[self.i] == "}":
                    self.fail("trailing comma before '}'")
                continue
            if self.i < self.n and self.s[self.i] == "}":
                self.i += 1
                return Node(vals, line, col, keys)
            self.fail("expected ',' or '}' in the object")

    def arr(self, line, col):
        self.i += 1
        vals = []
        self.ws()
        if self.i < self.n and self.s[self.i] == "]":
            self.i += 1
            return Node(vals, line, col)
        while True:
            vals.append(self.value())
            self.ws()
            if self.i < self.n and self.s[self.i] == ",":
                self.i += 1
                self.ws()
                if self.i < self.n and self.s[self.i] == "]":
                    self.fail("trailing comma before ']'")
                continue
            if self.i < self.n and self.s[self.i] == "]":
                self.i += 1
                return Node(vals, line, col)
            self.fail("expected ',' or ']' in the array")


def parse(text):
    p = _Parser(text)
    root = p.value()
    p.ws()
    if p.i < p.n:
        p.fail("unexpected text after the JSON value")
    return root


def type_name(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    return "an object"
