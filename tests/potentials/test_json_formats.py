"""String formats enforced while written (potentials.json.formats): each automaton accepts every
string its checker accepts, and a JSON Schema potential stops a string at its first character
outside the format."""

import asyncio
import ipaddress
import json
import random
import sys

import pytest
from jsonschema import Draft4Validator, Draft7Validator, Draft202012Validator, FormatChecker

from potentials import JSONSchema
from potentials.json.clauses import FORMAT_EXAMPLES
from potentials.json.formats import format_dfa, format_superset
from potentials.testing import MaskKeyContract
from tests.potentials.test_json_conformance import DRAFT, check_instance

CHECKER = Draft202012Validator.FORMAT_CHECKER
ENFORCED = ("date", "date-time", "time", "ipv4", "ipv6", "uri", "uri-reference", "uuid", "hostname",
            "duration")
# characters a mutation writes: each format's own, their other cases, near misses (a
# non-ASCII digit, a full-width colon, a dotless i), and what a runaway string writes
NOISE = "0123456789-:.+TtZzSsWw /?#@[]%\n\t\"é\u0663\uff1a\u0131x"


def _two(rng: random.Random, hi: int) -> str:
    return f"{rng.randrange(hi):02d}"


def _date(rng: random.Random) -> str:
    return f"{rng.randrange(0, 10000):04d}-{_two(rng, 14)}-{_two(rng, 33)}"


def _time(rng: random.Random) -> str:
    frac = rng.choice(["", "." + str(rng.randrange(10 ** rng.randrange(1, 7)))])
    zone = rng.choice(["Z", "z", "", f"+{_two(rng, 25)}:{_two(rng, 61)}", f"-{_two(rng, 25)}:00"])
    return f"{_two(rng, 25)}:{_two(rng, 61)}:{_two(rng, 61)}{frac}{zone}"


def _ipv4(rng: random.Random) -> str:
    return ".".join(rng.choice(["", "0", "00"]) * (rng.random() < 0.1) + str(rng.randrange(300))
                    for _ in range(4))


def _uuid(rng: random.Random) -> str:
    h = "".join(rng.choice("0123456789abcdefABCDEF") for _ in range(32))
    s = "-".join([h[:8], h[8:12], h[12:16], h[16:20], h[20:]])
    s = rng.choice(["", "urn:", "uuid:", "urn:uuid:", "{"]) * (rng.random() < 0.2) + s
    if rng.random() < 0.2:  # what int(h, 16) reads besides hex digits
        i = rng.randrange(24, len(s))
        s = s[:i] + rng.choice(["\u0663", "_", " ", "-", "urn:"]) + s[i + 1:]
    return s + rng.choice(["", "}", " ", "\u2003"]) * (rng.random() < 0.2)


def _ipv6(rng: random.Random) -> str:
    address = ipaddress.IPv6Address(rng.getrandbits(128) >> rng.choice([0, 0, 64, 112, 127]))
    text = rng.choice([address.compressed, address.exploded, address.exploded.upper()])
    if rng.random() < 0.2:  # an IPv4 address in the last 32 bits
        text = text.rsplit(":", 2)[0] + ":" + _ipv4(rng)
    return text + rng.choice(["", "%eth0", "%"]) * (rng.random() < 0.1)


def _hostname(rng: random.Random) -> str:
    def label() -> str:
        n = rng.choice([1, 2, 5, 12, 62, 63, 64])
        return "".join(rng.choice("abcXYZ09-\u0663\u0131\u212a") for _ in range(n))
    name = ".".join(label() for _ in range(rng.choice([1, 2, 3, 5])))
    return name + "." * (rng.random() < 0.2)


def _duration(rng: random.Random) -> str:
    parts = [f"{rng.randrange(100)}{d}" for d in "YMWD" if rng.random() < 0.4]
    clock = [f"{rng.choice(['1', '0.5', '2,5', '1e1'])}{d}" for d in "HMS" if rng.random() < 0.4]
    body = "".join(parts) + ("T" + "".join(clock) if clock or rng.random() < 0.1 else "")
    return rng.choice(["", "", "+", "-"]) + "P" + body


URIS = ["http://example.com/a/b?x=1&y=%20#f", "mailto:a@b.co", "urn:isbn:0451450523", "//host/p",
        "rel/path", "a:", "http://[::1]:8080/", "https://u:p@h.io:/x;y=z", "file:///etc/hosts",
        "http://192.168.0.1/", "#frag", "?q", "", "http://[v7.x]/", "ftp://a.b/%7e~"]

BASES = {
    "date": _date,
    "date-time": lambda rng: _date(rng) + rng.choice("Tt") + _time(rng),
    "time": _time,
    "ipv4": _ipv4,
    "ipv6": _ipv6,
    "uuid": _uuid,
    "hostname": _hostname,
    "duration": _duration,
    "uri": lambda rng: rng.choice(URIS),
    "uri-reference": lambda rng: rng.choice(URIS),
}


def _mutated(rng: random.Random, s: str) -> str:
    for _ in range(rng.choice([0, 0, 1, 1, 2])):
        i = rng.randrange(len(s) + 1)
        c = rng.choice(NOISE)
        op = rng.randrange(3)
        s = s[:i] + c + s[i:] if op == 0 else s[:i] + c + s[i + 1:] if op == 1 else s[:i] + s[i + 1:]
    return s + "\n" * (rng.random() < 0.05)


@pytest.mark.parametrize("fmt", ENFORCED)
def test_every_string_the_checker_accepts_is_in_the_automaton(fmt):
    """checker.conforms(s, f) => s in L(format_dfa(checker, f)), on 4000 strings near the
    format per format (random fields out of range, a character inserted, replaced or deleted,
    a final newline), in every draft that has the format; the automaton also rejects some."""
    rng = random.Random(fmt)
    dfa = format_dfa(CHECKER, fmt)
    assert dfa is not None
    accepted = rejected = 0
    for _ in range(4000):
        s = _mutated(rng, BASES[fmt](rng))
        ok = CHECKER.conforms(s, fmt)
        inside = dfa.fullmatch(s.encode("utf-8", "surrogatepass"))
        assert inside or not ok, (fmt, s)
        accepted += ok
        rejected += not inside
    assert accepted > 400 and rejected > 400, (accepted, rejected)
    for cls in (Draft7Validator, Draft4Validator):
        if fmt in cls.FORMAT_CHECKER.checkers:
            assert format_superset(cls.FORMAT_CHECKER, fmt) == format_superset(CHECKER, fmt)


def test_upper_maps_only_t_and_z_onto_the_date_time_alphabet():
    """The date-time checker reads s.upper(): every code point whose upper case is written
    with the regex's characters only is one of them, or t, or z (so [Tt] and [Zz] cover it)."""
    alphabet = set("0123456789-T:.Z+\n")
    onto = {c for c in map(chr, range(sys.maxunicode + 1))
            if c.upper() and set(c.upper()) <= alphabet}
    assert onto == alphabet | {"t", "z"}
    assert "2024-01-02t03:04:05z".upper() == "2024-01-02T03:04:05Z"


def test_every_character_int_reads_in_base_16_is_a_uuid_character():
    """uuid.UUID(s) ends in int(h, 16): every code point int accepts there (Unicode digits,
    whitespace, signs, underscores) is in the automaton's character class."""
    def reads(text: str) -> bool:
        try:
            int(text, 16)
        except ValueError:
            return False
        return True

    dfa = format_dfa(CHECKER, "uuid")
    read = [c for c in map(chr, range(sys.maxunicode + 1)) if reads(f"1{c}1") or reads(f"{c}1")]
    assert len(read) > 600  # the Unicode decimal digits among them
    tail = "-0000-0000-0000-000000000000"
    assert [c for c in read if not dfa.fullmatch(f"0000000{c}{tail}".encode())] == []


def test_every_character_a_hostname_label_takes_is_in_the_automaton():
    """fqdn reads s.lower() with re.IGNORECASE and Unicode digits: every code point the checker
    takes inside a label, or as a label of its own, the automaton takes there too."""
    dfa = format_dfa(CHECKER, "hostname")
    took = [c for c in map(chr, range(sys.maxunicode + 1)) if CHECKER.conforms(f"a{c}a", "hostname")]
    assert {"\u0131", "\u017f", "\u212a", "\u0663", "-", "."} <= set(took)
    assert [c for c in took if not dfa.fullmatch(f"a{c}a".encode())] == []
    ends = [c for c in took if CHECKER.conforms(c, "hostname")]  # a label of one character
    assert "-" not in ends and [c for c in ends if not dfa.fullmatch(c.encode())] == []


def test_format_examples_are_in_their_automata():
    for fmt in ENFORCED:
        example = FORMAT_EXAMPLES[fmt]
        assert CHECKER.conforms(example, fmt)
        assert format_dfa(CHECKER, fmt).fullmatch(example.encode())


def test_only_the_checkers_the_supersets_were_read_from_get_an_automaton():
    own = FormatChecker()
    own.checks("date")(lambda s: True)  # a user's checker: any string is a date
    assert format_dfa(own, "date") is None
    assert format_dfa(FormatChecker(), "date") is not None  # jsonschema's own, all formats
    assert format_dfa(Draft4Validator.FORMAT_CHECKER, "date") is None  # no date in draft 4
    assert format_dfa(CHECKER, "email") is None  # no regular superset worth enforcing
    assert format_dfa(CHECKER, "no-such-format") is None


async def _alive(pot, text: str) -> bool:
    return await pot.prefix(text.encode("utf-8")) > float("-inf")


@pytest.mark.parametrize("fmt, good, bad", [
    ("date-time", '"2022-07-07T09:34:40.33', '"2022-07-07T09:34:40.33S'),
    ("date-time", '"2022-07-07t09:34:40z"', '"2022-07-07 09'),
    ("date", '"1999-12-31"', '"1999-13'),
    ("time", '"23:59:59+01:00"', '"24'),
    ("ipv4", '"10.0.0.255"', '"10.0.0.256'),
    ("ipv6", '"2001:db8::ff00:42:8329"', '"2001:db8::g'),
    ("ipv6", '"::ffff:192.0.2.128"', '"::ffff:192.0.2.128%'),
    ("uri", '"https://a.b/c?d#e"', '"https://a.b/c d'),
    ("uri-reference", '"../x/y"', '"../x y'),
    ("uuid", '"123e4567-e89b-12d3-a456-426614174000"', '"123456789'),
    ("uuid", '"123E4567-E89B-12D3-A456-42661417400', '"john'),
    ("hostname", '"api.Example-1.com."', '"https:'),
    ("hostname", '"a.b', '"a..'),
    ("duration", '"PT1H30M"', '"1'),
    ("duration", '"-P3D"', '"-p'),
])
def test_a_string_stops_at_its_first_character_outside_the_format(fmt, good, bad):
    pot = JSONSchema({"type": "string", "format": fmt})
    assert asyncio.run(_alive(pot, good))
    assert not asyncio.run(_alive(pot, bad))
    plain = JSONSchema({"type": "string", "format": "email"})  # checked only when it closes
    assert asyncio.run(_alive(plain, bad))


FORMATS = {
    "type": "object",
    "properties": {f[0] + str(i): {"format": f} for i, f in enumerate(ENFORCED)},
    "additionalProperties": {"type": "string", "format": "date", "maxLength": 12},
}


def test_valid_documents_live_at_every_prefix_and_complete_agrees_with_jsonschema():
    """Over 300 documents of near-format strings: complete == the validator, and every prefix
    of a valid document is alive (the automata never cut a valid string)."""
    rng = random.Random(0)
    pot = JSONSchema(FORMATS, whitespace="flexible")
    want = Draft202012Validator(FORMATS, format_checker=CHECKER)
    valid = 0
    for _ in range(300):
        keys = rng.sample(sorted(FORMATS["properties"]) + ["x"], 3)
        fmts = {k: FORMATS["properties"].get(k, {"format": "date"})["format"] for k in keys}
        doc = {k: _mutated(rng, BASES[f](rng)) if rng.random() < 0.5 else BASES[f](rng)
               for k, f in fmts.items()}
        data = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode("utf-8")
        ok = want.is_valid(doc)
        assert (asyncio.run(pot.complete(data)) == 0.0) is ok, data
        if ok:
            valid += 1
            state = pot.initial()
            for i in range(len(data)):
                state = pot.advance(state, data[i:i + 1])
                assert state is not None, data[:i + 1]
    assert valid > 30


class TestFormatContract(MaskKeyContract):
    def potential(self):
        return JSONSchema({"type": "array", "items": {"type": "string", "format": "date-time"}})

    def contexts(self):
        out = {b""}
        for t in ['["2024-02-29T12:00:00Z"]', '["2024-02-29t12:00:00.5+01:00"]', '["2024-1',
                  '["2024-02-30T00:00:00Z"]', '["\\u0032024-01-01T00:00:00Z"]']:
            x = t.encode()
            out.update(x[:i] for i in range(len(x) + 1))
        return sorted(out)


@pytest.mark.parametrize("fmt", ENFORCED)
def test_the_suites_format_instances_agree_with_jsonschema(fmt):
    """The JSON Schema Test Suite's optional format file: on every instance, complete == stock
    jsonschema with its format checker, and the instances it accepts live at every prefix."""
    cases = json.loads((DRAFT / "optional" / "format" / f"{fmt}.json").read_text("utf-8"))
    accepted = 0
    for case in cases:
        pot = JSONSchema(case["schema"], whitespace="flexible")
        oracle = Draft202012Validator(case["schema"], format_checker=CHECKER)
        for test in case["tests"]:
            ok = oracle.is_valid(test["data"])
            assert check_instance(pot, test["data"], ok) is None, (case["description"], test)
            accepted += ok and isinstance(test["data"], str)
    assert accepted >= 5
