"""The maintained rule set (detect-secrets' bounded plugins) and credentials written as `name = value`."""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

from memory_admin.services.pii.findings import RULE_SET_PLUGINS, _Collector
from memory_admin.textnorm import Mapped, check_budget


class _Rule(NamedTuple):
    kind: str
    pattern: re.Pattern[str]
    literal: str | None  # a literal every match holds (lower-cased when `ignore_case`), or None
    ignore_case: bool  # read once here: `pattern.flags & re.IGNORECASE` is an enum operation of ~3 µs


@functools.lru_cache(maxsize=1)
def _rule_set() -> tuple[_Rule, ...]:
    """A _Rule for every pattern of the kept detect-secrets plugins (their `denylist`, the documented
    attribute of a regex-based plugin). No plugin's `verify` is ever called: it would send the value to
    the provider."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    by_name = {cls.__name__: cls for cls in get_mapping_from_secret_type_to_class().values()}
    return tuple(
        _Rule(kind, pattern, _required_literal(pattern), bool(pattern.flags & re.IGNORECASE))
        for name, kind in RULE_SET_PLUGINS.items()
        for pattern in by_name[name].denylist
    )


def _required_literal(pattern: re.Pattern[str]) -> str | None:
    """The longest run of literal characters (two or more) that every match of `pattern` holds, lower-cased
    when the pattern ignores case: a text without it is not searched. Read from the parse tree of
    `re._parser` (stable since 3.11; the one public alternative would be a hand-kept list per plugin);
    on any surprise the answer is None and the pattern is always searched."""
    from re import _constants as c  # noqa: PLC0415

    try:
        items = list(re._parser.parse(pattern.pattern, pattern.flags))  # noqa: SLF001
    except Exception:  # noqa: BLE001 - a prefilter only
        return None
    runs, run = [], ""
    for op, av in items:
        if op is c.LITERAL:
            run += chr(av)
        else:
            runs.append(run)
            run = ""
    runs.append(run)
    best = max(runs, key=len)
    if len(best) < 2:
        return None
    return best.lower() if pattern.flags & re.IGNORECASE else best


def _scan_rule_set(col: _Collector, form: Mapped) -> None:
    """The maintained rule set on the normalised form. detect-secrets reads a file line by line; none of
    the kept patterns can match across a line end, so reading the whole text at once finds the same."""
    text = form.text
    low = None
    for kind, pattern, literal, ignore_case in _rule_set():
        if literal is not None:
            if ignore_case:
                low = text.lower() if low is None else low
                if literal not in low:
                    continue
            elif literal not in text:
                continue
        check_budget()  # before each pattern that reads the text (a literal test is one C pass)
        for m in pattern.finditer(text):
            if m.end() > m.start():
                col.add(kind, form, m.start(), m.end())


# Credentials written as `name = value` in a credentials file, an env file, JSON, YAML, code or a URL
# query: a name that says secret (`aws_secret_access_key`, `DB_PASSWORD`, `"SecretAccessKey"`, `api-key`),
# an assignment (`=`, `:`, `:=`, `=>`), an optional quote, and a value that reads like a secret (not a
# word, a placeholder or a template). Every part is bounded and read whole, so each occurrence of a
# name costs a few hundred steps at most.
_CREDENTIAL_NAME = re.compile(
    r"secret|passw(?:or)?d|pwd|api[_-]?key|apikey|access[_-]?key|auth[_-]?key|private[_-]?key|"
    r"client[_-]?secret|auth[_-]?token|access[_-]?token|api[_-]?token|bearer[_-]?token"
)  # searched on the lower-cased text: an alternation of literals the engine skips ahead to
_CREDENTIAL_ASSIGNMENT = re.compile(
    r"(?:[_-][A-Za-z0-9]{1,15}|[A-Z][a-z0-9]{0,14}){0,3}+"  # `_access_key`, `AccessKey`: not `secretary`
    r"[\"'\]]{0,2}+[ \t]{0,5}+(?::=|=>|==?|:)[ \t]{0,5}+"
    r"(?P<quote>[\"'`]?)(?P<value>[^\s\"'`,;&<>(){}\[\]]{8,200}+)",
)
_PLACEHOLDER = re.compile(
    r"^(?:x+|\*+|\.+|-+|_+|changeme|password\d*|secret\d*|none|null|true|false|example\w*)$", re.I
)
_URL_PASSWORD = re.compile(r"(?<=://)(?P<user>[^\s/@:{}]{1,64}+):(?P<value>[^\s/@{}]{3,128}+)@")
_NPM_TOKEN = re.compile(r"_authToken=[ \t]{0,5}+(?P<value>npm_[A-Za-z0-9]{36}|[A-Fa-f0-9-]{36})", re.I)
_PYPI_TOKEN = re.compile(r"pypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{50,400}+")


_DOTTED_NAME = re.compile(r"[A-Za-z_]+(?:\.[A-Za-z_]+)+")


def _reads_as_secret(value: str) -> bool:
    """A value of an assignment that is a secret rather than prose, a number, a name or a placeholder:
    no template or variable (`${…}`, `$VAR`, `%s`, `os.environ`), not a known placeholder, and letters
    with digits or symbols (words joined by `-`, `_` or `.` and CamelCase names are not enough)."""
    if _PLACEHOLDER.match(value) or value[:1] in "$%" or "{{" in value or _DOTTED_NAME.fullmatch(value):
        return False
    has_alpha = any(c.isalpha() for c in value)
    has_digit = any(c.isdigit() for c in value)
    has_symbol = any(not c.isalnum() and c not in "-_." for c in value)
    return has_alpha and (has_digit or has_symbol)


def _scan_credentials(col: _Collector, form: Mapped) -> None:
    text = form.text
    low = text.lower()
    if len(low) != len(text):  # a letter whose lower case is longer: match the name case-blind instead
        low = "".join(ch.lower() if len(ch.lower()) == 1 else ch for ch in text)
    for n, name in enumerate(_CREDENTIAL_NAME.finditer(low)):
        if n % 256 == 0:
            check_budget()
        m = _CREDENTIAL_ASSIGNMENT.match(text, name.end())
        if m and _reads_as_secret(m["value"]):
            col.add("credential", form, m.start("value"), m.end("value"))
    check_budget()
    for m in _URL_PASSWORD.finditer(text):
        if _reads_as_secret(m["value"]):
            col.add("url_password", form, m.start("value"), m.end("value"))
    for kind, pattern in (("npm_token", _NPM_TOKEN), ("pypi_token", _PYPI_TOKEN)):
        for m in pattern.finditer(text):
            col.add(kind, form, *(m.span("value") if pattern.groups else m.span()))
