"""The JSON Schema Test Suite (draft2020-12) against potentials.JSONSchema.

For every test instance d of every case, with x = json.dumps(d) (default settings: ASCII with
\\u escapes, ", " and ": " separators, floats by repr; json.load then json.dumps is an exact
round trip for every value in the suite) and the potential built with whitespace="flexible":

    complete(x) == 0   iff   the suite says d is valid          (and likewise for the UTF-8
                                                                 dump, ensure_ascii=False, and
                                                                 for whitespace="compact" on
                                                                 the dump without spaces)
    prefix(y) == 0     for every byte prefix y of x, when d is valid

Departures, each listed below with its reason: ``format`` is asserted (deliberately), so
format.json (annotation-only in the suite) is counted separately and disagrees exactly where a
format is violated; jsonschema, the oracle ``complete`` follows, does not implement
``$vocabulary``; and an integer is written as an integer literal (1.0 is refused where only
integers are allowed). Run this file as a script to print the counts recorded in
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest

# A copy of ../shared/conformance/json-schema-test-suite (see its SOURCE.txt), kept in the
# repository so that the suite runs wherever the clone lives.
SUITE = Path(__file__).resolve().parents[1] / "data" / "json-schema-test-suite"
DRAFT = SUITE / "tests" / "draft2020-12"
REMOTE_BASE = "http://localhost:1234/"


#: (file, case description, test description) -> why the potential departs from the suite there
DEPARTURES = {
    (
        "vocabulary.json",
        "schema that uses custom metaschema with with no validation vocabulary",
        "no validation: invalid number, but it still validates",
    ): "jsonschema's Draft202012Validator ignores $vocabulary and applies `minimum` anyway",
    (
        "type.json",
        "integer type matches integers",
        "a float with zero fractional part is an integer",
    ): "an integer is written as an integer literal (1, not 1.0): a departure, as every peer",
}
FORMAT_FILE = "format.json"


def remotes_registry():
    """Every file under remotes/ at the address the suite expects (http://localhost:1234/)."""
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    pairs = []
    for path in sorted((SUITE / "remotes").rglob("*.json")):
        uri = REMOTE_BASE + path.relative_to(SUITE / "remotes").as_posix()
        contents = json.loads(path.read_text(encoding="utf-8"))
        pairs.append((uri, Resource.from_contents(contents, default_specification=DRAFT202012)))
    return Registry().with_resources(pairs)


def run_file(path: Path, registry) -> tuple[Counter, list]:
    """Counts of agree / disagree / rejected for one suite file, and what went wrong."""
    from jsonschema import Draft202012Validator

    from potentials.json import JSONSchema

    counts: Counter = Counter()
    problems: list = []
    for case in json.loads(path.read_text(encoding="utf-8")):
        try:
            pot = JSONSchema(case["schema"], whitespace="flexible", registry=registry)
            compact = JSONSchema(case["schema"], registry=registry)
        except Exception as err:  # counted, and reported by the test
            counts["rejected"] += len(case["tests"])
            problems.append((path.name, case["description"], "rejected", repr(err)))
            continue
        oracle = Draft202012Validator(
            case["schema"], registry=registry, format_checker=Draft202012Validator.FORMAT_CHECKER
        )
        for test in case["tests"]:
            ok = check_instance(pot, test["data"], test["valid"])
            dense = json.dumps(test["data"], separators=(",", ":")).encode("utf-8")
            if ok is None and asyncio.run(compact.complete(dense)) != pot_said(pot, test["data"]):
                ok = f"compact complete differs on {dense[:80]!r}"
            try:  # stock jsonschema, for the record: does it agree with the potential?
                said = oracle.is_valid(test["data"])
                agrees = said == test["valid"] if ok is None else said != test["valid"]
                counts["jsonschema agrees" if agrees else "jsonschema disagrees"] += 1
            except Exception:
                counts["jsonschema raises"] += 1
            counts["agree" if ok is None else "disagree"] += 1
            if ok is not None:
                problems.append((path.name, case["description"], test["description"], ok))
    return counts, problems


def pot_said(pot, data) -> float:
    return asyncio.run(pot.complete(json.dumps(data).encode("utf-8")))


def check_instance(pot, data, valid: bool) -> str | None:
    """None when the potential agrees with the suite on ``data``, else what differs."""
    for text in (json.dumps(data), json.dumps(data, ensure_ascii=False)):
        x = text.encode("utf-8")
        got = asyncio.run(pot.complete(x)) == 0.0
        if got != valid:
            return f"complete={got} for {text[:80]!r}"
        if valid:
            state = pot.initial()
            for i in range(len(x)):
                state = pot.advance(state, x[i : i + 1])
                if state is None:
                    return f"prefix dead after {x[: i + 1][-40:]!r}"
            step = max(1, len(x) // 16)
            for i in range(0, len(x), step):  # the public prefix() on a sample of prefixes
                if asyncio.run(pot.prefix(x[:i])) != 0.0:
                    return f"prefix() dead at {x[:i][-40:]!r}"
    return None


@pytest.fixture(scope="module")
def registry():
    return remotes_registry()


def suite_files() -> list[str]:
    return sorted(p.name for p in DRAFT.glob("*.json")) if DRAFT.is_dir() else []


@pytest.mark.parametrize("name", [n for n in suite_files() if n != FORMAT_FILE])
def test_suite_file_agrees(name, registry):
    counts, problems = run_file(DRAFT / name, registry)
    unexplained = [p for p in problems if p[:3] not in DEPARTURES]
    assert not unexplained, unexplained
    assert counts["rejected"] == 0
    assert counts["agree"] > 0


def test_format_is_asserted(registry):
    """format.json: the only disagreements are invalid strings the suite calls annotation-only."""
    counts, problems = run_file(DRAFT / FORMAT_FILE, registry)
    assert counts["rejected"] == 0
    for _, case, test, what in problems:
        assert test.startswith("invalid ") and "only an annotation" in test, (case, test, what)
        assert what.startswith("complete=False"), (case, test, what)
    assert counts["disagree"] == len(problems) > 0


def test_departures_still_depart(registry):
    """Every listed departure is real (the list must not go stale)."""
    for (name, case, test) in DEPARTURES:
        _, problems = run_file(DRAFT / name, registry)
        assert (name, case, test) in [p[:3] for p in problems]


def main() -> None:
    """Counts per group; "jsonschema agrees" compares the potential with stock jsonschema."""
    registry = remotes_registry()
    groups = {
        "draft2020-12/*.json except format.json": [DRAFT / n for n in suite_files()
                                                   if n != FORMAT_FILE],
        "draft2020-12/format.json (format asserted)": [DRAFT / FORMAT_FILE],
        "draft2020-12/optional/*.json": sorted((DRAFT / "optional").glob("*.json")),
        "draft2020-12/optional/format/*.json": sorted(
            (DRAFT / "optional" / "format").glob("*.json")
        ),
    }
    for title, paths in groups.items():
        total: Counter = Counter()
        for path in paths:
            counts, problems = run_file(path, registry)
            total.update(counts)
            if "optional" not in title:
                for p in problems:
                    print("  departs:", p)
        print(f"{title}: {dict(sorted(total.items()))}")


if __name__ == "__main__":
    main()
