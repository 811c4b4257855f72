"""Regular supersets of string formats, enforced while a string is written.

For a format f that has an automaton here under format checker C, and any string s,

    C.conforms(s, f)  =>  s.encode() in L(format_dfa(C, f))

so the automaton never rejects a string the checker accepts, and the checker itself still runs
when the string closes (``Clause.needs_check``). What it adds: a string that leaves the superset
stops at its first wrong character, instead of writing on until ``max_tokens`` (a date-time with
a stray letter can never close, but without the automaton every continuation looks allowed).

Each superset is read off the code of the checker jsonschema registers for the format (with its
``format-nongpl`` extra; ``date`` as checked since jsonschema's fix for Python 3.11's wider
``date.fromisoformat``, python-jsonschema/jsonschema#1076, older than the 4.23 this package
requires), and holds only for that function; a format whose checker is another
(a user's, a different library's) gets no automaton and is checked only when it closes:

=================  ==================================================  =======================
format             the checker accepts s when                          superset
=================  ==================================================  =======================
date               ``\\d{4}-\\d{2}-\\d{2}`` fullmatches (``re.ASCII``)   that, year not 0,
                   and ``date.fromisoformat(s)`` returns               month 01-12, day 01-31
date-time          rfc3339-validator's regex ``.match``\\es s.upper()    the date's, ``T t``,
                   (``re.ASCII``; ``$`` also before a final newline),  its time, ``Z z``; a
                   the year is not 0, the day exists in its month      final newline allowed
time               date-time accepts ``"1970-01-01T" + s``             the time part of that
ipv4               ``ipaddress.IPv4Address(s)``: four ``.``-separated   octets 0-255, leading
                   ASCII decimal octets 0-255, no leading zero          zeros allowed
ipv6               ``ipaddress.IPv6Address(s)`` without a scope: at      hex digits, ``:`` and
                   most 9 ``:``-separated parts of at most 4 hex        ``.``, 2-55 of them
                   digits, the last one maybe an IPv4 address
uri,               rfc3986-validator's compiled regex ``.match``\\es s   that regex, read at
uri-reference                                                          run time, then ``\\n?``
hostname           fqdn's ``FQDN(s, min_labels=1).is_valid``:           labels of 1-63 such
                   s.lower() at most 253 long (254 with a final dot),   characters, no ``-``
                   ``.match``\\ed by labels of ``-``, ``A-Z``, ``\\d``  at either end, a final
                   under ``re.IGNORECASE`` (``\\d``: Unicode digits)    dot and newline
duration           isoduration's ``parse_duration(s)`` (an optional     that start and that
                   sign, then ``P``) and s ends with one of ``DMYWHS``   end, anything between
uuid               ``uuid.UUID(s)`` (``urn:`` and ``uuid:`` removed,    ``-`` at 8, 13, 18 and
                   ``{}`` stripped, ``-`` removed, then 32 characters   23, every character one
                   ``int(h, 16)`` reads) and ``-`` at 8, 13, 18, 23     ``int`` or the removals
                                                                       admit (any length)
=================  ==================================================  =======================

``s.upper()`` maps no character but ``t`` and ``z`` onto the date-time regex's alphabet, and a
hostname character is one whose ``lower()`` is one character that ``[-A-Z\\d]`` matches under
``re.IGNORECASE``: ASCII letters and ``-``, the Unicode digits, ``ı``, ``ſ`` and the Kelvin sign
(tests/potentials/test_json_formats.py checks every code point for both). ``$`` in a
``re.match`` also matches before a final newline, hence the optional ``\\n``.
"""

from __future__ import annotations

import functools
import importlib
import re
from typing import Any

from potentials.regex.automaton import ByteDFA, compile_regex

_YEAR = "(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_MONTH = "(?:0[1-9]|1[0-2])"
_DAY = "(?:0[1-9]|[12][0-9]|3[01])"
_TIME = ("(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?"
         "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])")
_OCTET = "(?:25[0-5]|2[0-4][0-9]|[01]?[0-9]?[0-9])"
# a hostname label's character other than "-"
_LABEL_CHAR = "[\\dA-Za-z\\u0131\\u017f\\u212a]"
_LABEL = f"{_LABEL_CHAR}(?:[\\dA-Za-z\\u0131\\u017f\\u212a-]{{0,61}}{_LABEL_CHAR})?"
# a character of a string uuid.UUID reads: one int(h, 16) accepts (a hex or any Unicode decimal
# digit, whitespace, a sign, an underscore, the x of 0x) or one UUID removes (urn:, uuid:, {}, -)
_UUID_CHAR = "[\\da-fA-F\\s+_xXurni:{}\\-]"

#: format -> (the name of the jsonschema checker function the superset was read from, the name
#: in that function's module of the library function it relies on (or None), the superset
#: pattern with its re flags (None: the library's own regex, ``_RFC3986``))
_SUPERSETS: dict[str, tuple[str, str | None, tuple[str, int] | None]] = {
    "date": ("is_date", None, (f"{_YEAR}-{_MONTH}-{_DAY}", 0)),
    "date-time": ("is_datetime", "validate_rfc3339",
                  (f"{_YEAR}-{_MONTH}-{_DAY}[Tt]{_TIME}\\n?", 0)),
    "time": ("is_time", "validate_rfc3339", (f"{_TIME}\\n?", 0)),
    "ipv4": ("is_ipv4", None, (f"(?:{_OCTET}\\.){{3}}{_OCTET}", 0)),
    # 8 parts of at most 4 and a last of at most 15 (an IPv4 address), with their 8 colons
    "ipv6": ("is_ipv6", None, ("[0-9A-Fa-f:.]{2,55}", 0)),
    "hostname": ("is_host_name", "FQDN", (f"(?:{_LABEL}\\.)*{_LABEL}\\.?\\n?", 0)),
    "duration": ("is_duration", "isoduration", ("[+-]?P(?s:.)*[DMYWHS]", 0)),
    "uuid": ("is_uuid", None,
             (f"{_UUID_CHAR}{{8}}-{_UUID_CHAR}{{4}}-{_UUID_CHAR}{{4}}-{_UUID_CHAR}{{4}}-"
              f"{_UUID_CHAR}*", 0)),
    "uri": ("is_uri", "validate_rfc3986", None),
    "uri-reference": ("is_uri_reference", "validate_rfc3986", None),
}

#: the library functions (or modules) the supersets were read from, by the name jsonschema
#: imports them as: name -> (module, attribute, None for the module itself)
_LIBRARY = {
    "FQDN": ("fqdn", "FQDN"),
    "isoduration": ("isoduration", None),
    "validate_rfc3339": ("rfc3339_validator", "validate_rfc3339"),
    "validate_rfc3986": ("rfc3986_validator", "validate_rfc3986"),
}

#: rfc3986-validator's compiled regex for each format
_RFC3986 = {"uri": "URI_RE_COMP", "uri-reference": "URI_REF_RE_COMP"}


def format_superset(checker: Any, fmt: str) -> tuple[str, int] | None:
    """The superset pattern (fullmatch) and its flags for ``fmt`` under ``checker`` (a
    jsonschema FormatChecker), or None when the checker's function is not the one the
    superset was read from."""
    entry = _SUPERSETS.get(fmt)
    checks = getattr(checker, "checkers", {}).get(fmt)
    if entry is None or checks is None:
        return None
    name, calls, pattern = entry
    func = checks[0]
    if getattr(func, "__module__", None) != "jsonschema._format" or func.__name__ != name:
        return None
    if calls is not None:
        # the function jsonschema's module calls under that name is the library's own
        module, attr = _LIBRARY[calls]
        library = _import(module)
        own = library if attr is None else getattr(library, attr, None)
        if library is None or func.__globals__.get(calls) is not own:
            return None
    if pattern is not None:
        return pattern
    library = _import("rfc3986_validator")
    compiled = getattr(library, _RFC3986[fmt], None)
    if not isinstance(compiled, re.Pattern):
        return None
    # under re.VERBOSE a comment may end the pattern: a newline (whitespace there) closes it
    body = compiled.pattern + ("\n" if compiled.flags & re.VERBOSE else "")
    return f"(?:{body})\\n?", compiled.flags


def format_dfa(checker: Any, fmt: str) -> ByteDFA | None:
    """The automaton of ``format_superset(checker, fmt)``, or None."""
    got = format_superset(checker, fmt)
    return None if got is None else _compiled(*got)


@functools.lru_cache(maxsize=32)
def _compiled(pattern: str, flags: int) -> ByteDFA:
    # one automaton per pattern for every schema: its lazily filled transitions and the string
    # masks lifted from them are shared, as for schema patterns (clauses._search_dfa)
    return compile_regex(pattern, flags)


def _import(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None
