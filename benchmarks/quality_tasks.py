"""Gold-answer tasks for the answer-quality benchmark (bench_quality.py) and their scoring.

Three families, each task a prompt, a constraint and a gold answer that a 135M instruct model
can find in the prompt's own text:

- ``json`` (30): extract 3-5 fields from a short text into a JSON object (JSON Schema with every
  field required, no other keys). score(x) = (1/|F|) sum_{f in F} [norm(x[f]) == norm(gold[f])],
  the fraction of fields right, where norm casefolds and trims strings (numbers compare as
  numbers).
- ``regex`` (15): a date, time or code in a fixed format found in the text, constrained by a
  regular expression. score(x) = [x == gold] (after trimming).
- ``grammar`` (10): a comma-separated list of items named in the text, constrained by a small
  Lark grammar. score(x) = [set(items(x)) == set(gold)].

``parse_answer(task, text)`` reads an answer out of free text as a user would (the outermost
``{...}`` for JSON, the first regex match, the first line the grammar accepts) and is used for
unconstrained sampling; constrained samples are scored on their whole text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import jsonschema

# ---------------------------------------------------------------------------- task type


@dataclass(frozen=True)
class Task:
    """One benchmark task.

    Attributes:
        name: unique id, ``family-NN``.
        family: "json", "regex" or "grammar".
        prompt: the user message, or a list of chat messages (few-shot turns); the chat
            template is applied by smc.generate.
        gold: the right answer: a dict (json), a string (regex), a list of items (grammar).
        schema: the JSON Schema (json tasks).
        pattern: the regular expression (regex tasks).
        grammar: the Lark grammar (grammar tasks).
        max_tokens: the generation budget for this task.
    """

    name: str
    family: str
    prompt: str | list[dict[str, str]]
    gold: Any
    schema: dict | None = None
    pattern: str | None = None
    grammar: str | None = None
    max_tokens: int = 64


def _object_schema(fields: dict[str, str]) -> dict:
    """{"type": "object", every field required with its JSON type, no other keys}."""
    return {
        "type": "object",
        "properties": {k: {"type": t} for k, t in fields.items()},
        "required": list(fields),
        "additionalProperties": False,
    }


def _json_type(v: Any) -> str:
    if isinstance(v, bool):
        raise TypeError("no boolean fields in the task set")
    return "integer" if isinstance(v, int) else "string"


# ---------------------------------------------------------------------------- JSON extraction
# (what the text is about, the text, the gold fields in prompt order)
_JSON: list[tuple[str, str, dict[str, Any]]] = [
    ("person", "Maria Lopez is 34 years old. She lives in Madrid and works as a nurse.",
     {"name": "Maria Lopez", "age": 34, "city": "Madrid", "job": "nurse"}),
    ("person", "John Carter, a 52-year-old teacher, lives in Boston.",
     {"name": "John Carter", "age": 52, "city": "Boston", "job": "teacher"}),
    ("person", "Akira Sato is a 29 year old engineer from Tokyo.",
     {"name": "Akira Sato", "age": 29, "city": "Tokyo", "job": "engineer"}),
    ("person", "Meet Emma Brown. She is 41, works as a lawyer and lives in London.",
     {"name": "Emma Brown", "age": 41, "city": "London", "job": "lawyer"}),
    ("person", "Lucas Silva, age 23, is a student in Lisbon.",
     {"name": "Lucas Silva", "age": 23, "city": "Lisbon", "job": "student"}),
    ("person", "The chef Paul Martin is 45 and lives in Paris.",
     {"name": "Paul Martin", "age": 45, "city": "Paris", "job": "chef"}),
    ("person", "Sara Khan, 38, is a doctor in Dubai.",
     {"name": "Sara Khan", "age": 38, "city": "Dubai", "job": "doctor"}),
    ("person", "Tom Wilson is a pilot. He is 57 years old and lives in Sydney.",
     {"name": "Tom Wilson", "age": 57, "city": "Sydney", "job": "pilot"}),
    ("person", "Anna Novak lives in Prague. She is 31 and she is a designer.",
     {"name": "Anna Novak", "age": 31, "city": "Prague", "job": "designer"}),
    ("person", "Omar Haddad, a farmer aged 63, lives in Cairo.",
     {"name": "Omar Haddad", "age": 63, "city": "Cairo", "job": "farmer"}),
    ("person", "Linda Park is 27. She is a writer living in Seoul.",
     {"name": "Linda Park", "age": 27, "city": "Seoul", "job": "writer"}),
    ("person", "Peter Jones, 49, works as a banker in Zurich.",
     {"name": "Peter Jones", "age": 49, "city": "Zurich", "job": "banker"}),
    ("person", "Mia Rossi is 19 years old and lives in Rome.",
     {"name": "Mia Rossi", "age": 19, "city": "Rome"}),
    ("person", "David Cohen lives in Berlin and is 36 years old.",
     {"name": "David Cohen", "age": 36, "city": "Berlin"}),
    ("person", "Nina Petrova, 44, lives in Moscow.",
     {"name": "Nina Petrova", "age": 44, "city": "Moscow"}),
    ("book", "The novel Silent River was written by Jane Miller in 1998.",
     {"title": "Silent River", "author": "Jane Miller", "year": 1998}),
    ("book", "In 2011, Mark Evans published his book Deep Blue.",
     {"title": "Deep Blue", "author": "Mark Evans", "year": 2011}),
    ("book", "Winter Garden is a book by Clara Hughes, first printed in 1987.",
     {"title": "Winter Garden", "author": "Clara Hughes", "year": 1987}),
    ("movie", "The film Night Train, directed by Sam Lee, came out in 2005.",
     {"title": "Night Train", "director": "Sam Lee", "year": 2005}),
    ("movie", "Red Moon is a 2019 movie directed by Ana Costa.",
     {"title": "Red Moon", "director": "Ana Costa", "year": 2019}),
    ("product", "The Zen lamp costs 45 dollars and comes in white.",
     {"product": "Zen lamp", "price": 45, "color": "white"}),
    ("product", "Our new Swift bike is red and sells for 320 dollars.",
     {"product": "Swift bike", "price": 320, "color": "red"}),
    ("product", "The Cozy chair, in green, is priced at 150 dollars.",
     {"product": "Cozy chair", "price": 150, "color": "green"}),
    ("pet", "My dog Max is 5 years old.",
     {"name": "Max", "animal": "dog", "age": 5}),
    ("pet", "Luna is a 3 year old cat.",
     {"name": "Luna", "animal": "cat", "age": 3}),
    ("pet", "We have a parrot called Kiwi. Kiwi is 12 years old.",
     {"name": "Kiwi", "animal": "parrot", "age": 12}),
    ("company", "Bluewave was founded in 2008 in Canada and has 250 employees.",
     {"company": "Bluewave", "year": 2008, "country": "Canada", "employees": 250}),
    ("company", "Greenleaf, a company from Kenya, was founded in 2015. It employs 40 people.",
     {"company": "Greenleaf", "year": 2015, "country": "Kenya", "employees": 40}),
    ("flight", "Flight 417 of Delta leaves from Atlanta and lands in Denver.",
     {"airline": "Delta", "number": 417, "from": "Atlanta", "to": "Denver"}),
    ("flight", "United flight 88 goes from Chicago to Houston.",
     {"airline": "United", "number": 88, "from": "Chicago", "to": "Houston"}),
]


def _json_prompt(about: str, text: str, gold: dict[str, Any]) -> str:
    keys = ", ".join(f'"{k}"' for k in gold)
    return f"Extract the {about}'s details from this text as JSON with the keys {keys}. Text: {text}"


# ---------------------------------------------------------------------------- regex answers
_DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_TIME = r"[0-9]{2}:[0-9]{2}"
_REGEX: list[tuple[str, str, str]] = [
    ("The meeting is on March 14, 2023. Give the date as YYYY-MM-DD.", _DATE, "2023-03-14"),
    ("Tom was born on July 4, 1990. Give his birth date as YYYY-MM-DD.", _DATE, "1990-07-04"),
    ("The shop opened on 2 January 2015. Give the date as YYYY-MM-DD.", _DATE, "2015-01-02"),
    ("The concert is on December 25, 2024. Give the date as YYYY-MM-DD.", _DATE, "2024-12-25"),
    ("The exam takes place on May 9, 2022. Give the date as YYYY-MM-DD.", _DATE, "2022-05-09"),
    ("The train leaves at 7:45 in the morning. Give the time as HH:MM (24-hour).", _TIME, "07:45"),
    ("Lunch starts at 12:30. Give the time as HH:MM (24-hour).", _TIME, "12:30"),
    ("The movie begins at 9 pm. Give the time as HH:MM (24-hour).", _TIME, "21:00"),
    ("The store closes at 18:15. Give the closing time as HH:MM (24-hour).", _TIME, "18:15"),
    ("The bus arrives at 6:05 am. Give the time as HH:MM (24-hour).", _TIME, "06:05"),
    ("Your booking code is AB1234. What is the booking code?", r"[A-Z]{2}[0-9]{4}", "AB1234"),
    ("The package tracking number is ZX9081. What is the tracking number?", r"[A-Z]{2}[0-9]{4}",
     "ZX9081"),
    ("Call me at 555-0142. What is the phone number?", r"[0-9]{3}-[0-9]{4}", "555-0142"),
    ("The office phone number is 555-7731. What is the phone number?", r"[0-9]{3}-[0-9]{4}",
     "555-7731"),
    ("Room 214 is on the second floor. What is the room number?", r"[0-9]{3}", "214"),
]

# ---------------------------------------------------------------------------- grammar answers
#: a comma-separated list of lowercase words (one or two per item)
LIST_GRAMMAR = r"""
start: item (", " item)*
item: WORD (" " WORD)?
WORD: /[a-z]+/
"""
_GRAMMAR: list[tuple[str, list[str]]] = [
    ("I bought apples, bananas and pears.", ["apples", "bananas", "pears"]),
    ("The flag has red, white and blue stripes.", ["red", "white", "blue"]),
    ("We visited the zoo and saw a lion, a zebra and a giraffe.", ["lion", "zebra", "giraffe"]),
    ("She plays the piano and the violin.", ["piano", "violin"]),
    ("For breakfast he ate eggs, toast and bacon.", ["eggs", "toast", "bacon"]),
    ("The team needs a hammer, nails and a saw.", ["hammer", "nails", "saw"]),
    ("My garden has roses, tulips and daisies.", ["roses", "tulips", "daisies"]),
    ("They speak english and spanish at home.", ["english", "spanish"]),
    ("The recipe uses flour, sugar, butter and milk.", ["flour", "sugar", "butter", "milk"]),
    ("On the desk there is a lamp, a pen and a notebook.", ["lamp", "pen", "notebook"]),
]


#: two worked examples before each list task: asked only for the list, the 135M model repeats
#: the text instead (every method scored 0 on the grammar tasks with a bare instruction)
_LIST_SHOTS = [("The shop sells bread, cheese and wine.", "bread, cheese, wine"),
               ("He owns a cat and a dog.", "cat, dog")]


def _list_prompt(text: str) -> list[dict[str, str]]:
    ask = "List the things named in this text, separated by commas, in lowercase. Text: "
    msgs = []
    for q, a in _LIST_SHOTS:
        msgs += [{"role": "user", "content": ask + q}, {"role": "assistant", "content": a}]
    return msgs + [{"role": "user", "content": ask + text}]


def _build() -> list[Task]:
    tasks = []
    for i, (about, text, gold) in enumerate(_JSON):
        schema = _object_schema({k: _json_type(v) for k, v in gold.items()})
        tasks.append(Task(f"json-{i:02d}", "json", _json_prompt(about, text, gold), gold, schema=schema,
                          max_tokens=64))
    for i, (prompt, pattern, gold) in enumerate(_REGEX):
        tasks.append(Task(f"regex-{i:02d}", "regex", prompt, gold, pattern=pattern, max_tokens=16))
    for i, (text, gold) in enumerate(_GRAMMAR):
        tasks.append(Task(f"grammar-{i:02d}", "grammar", _list_prompt(text), gold, grammar=LIST_GRAMMAR,
                          max_tokens=24))
    return tasks


TASKS: list[Task] = _build()
FAMILIES = ("json", "regex", "grammar")


def select(names: str | None = None, families: str | None = None, limit: int | None = None) -> list[Task]:
    """Tasks by comma-separated names (in that order; "ada" is the Ada persona task, not in
    TASKS) and/or families (all of TASKS by default), the first ``limit`` of each family.
    ValueError for an unknown name or family."""
    by_name = {t.name: t for t in [*TASKS, ADA]}
    chosen = list(TASKS)
    if names:
        wanted = [n.strip() for n in names.split(",") if n.strip()]
        bad = [n for n in wanted if n not in by_name]
        if bad:
            raise ValueError(f"unknown task {bad[0]!r}")
        chosen = [by_name[n] for n in wanted]
    if families:
        fams = [f.strip() for f in families.split(",") if f.strip()]
        bad = [f for f in fams if f not in FAMILIES]
        if bad:
            raise ValueError(f"unknown task family {bad[0]!r}; choose from {', '.join(FAMILIES)}")
        chosen = [t for t in chosen if t.family in fams]
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        kept: dict[str, int] = {}
        out = []
        for t in chosen:
            if kept.get(t.family, 0) < limit:
                kept[t.family] = kept.get(t.family, 0) + 1
                out.append(t)
        chosen = out
    return chosen


# ---------------------------------------------------------------------------- scoring
def _norm(v: Any) -> Any:
    if isinstance(v, str):
        return " ".join(v.split()).casefold()
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def list_items(text: str) -> list[str]:
    """The items of a comma-separated list ("a, b and c" also splits on the final "and")."""
    parts = re.split(r",\s*|\s+and\s+", text.strip().rstrip("."))
    return [" ".join(p.split()).casefold() for p in parts if p.strip()]


def score(task: Task, answer: Any) -> float:
    """Score in [0, 1] of an answer already read out of the text (None: no answer, score 0).

    json: answer is the decoded object; the fraction of gold fields equal after ``_norm``
    (an answer that is not an object scores 0). regex: [answer == gold]. grammar: [set of
    list items == set of gold items].
    """
    if answer is None:
        return 0.0
    if task.family == "json":
        if not isinstance(answer, dict):
            return 0.0
        return sum(_norm(answer.get(k)) == _norm(v) for k, v in task.gold.items()) / len(task.gold)
    if task.family == "regex":
        return float(isinstance(answer, str) and answer.strip() == task.gold)
    if task.family == "grammar":
        return float(isinstance(answer, str) and set(list_items(answer)) == set(task.gold))
    raise ValueError(f"unknown task family {task.family!r}")


def outermost_object(text: str) -> str | None:
    """The text from the first '{' to the last '}' (what a user would cut out), or None."""
    start, end = text.find("{"), text.rfind("}")
    return text[start:end + 1] if 0 <= start < end else None


def parse_answer(task: Task, text: str, constrained: bool) -> tuple[Any, bool]:
    """(answer, valid) read from a generated text.

    constrained: the text is a finished sample of the task's constraint, so it is the answer as
    it stands (JSON decoded). Otherwise a user's reading of free text: json, the outermost
    ``{...}`` decoded and validated against the schema; regex, the first match of the pattern;
    grammar, the first non-empty line that the grammar accepts. valid says whether that
    reading succeeded (and, for json, validated).
    """
    if task.family == "json":
        doc = text if constrained else outermost_object(text)
        if doc is None:
            return None, False
        try:
            obj = json.loads(doc)
        except ValueError:
            return None, False
        ok = jsonschema.Draft202012Validator(task.schema).is_valid(obj)
        return (obj if ok else None), ok
    if task.family == "regex":
        if constrained:
            return text, re.fullmatch(task.pattern, text) is not None
        m = re.search(task.pattern, text)
        return (m.group(0) if m else None), m is not None
    if task.family == "grammar":
        lines = [text] if constrained else [ln.strip() for ln in text.splitlines() if ln.strip()]
        for ln in lines:
            if grammar_accepts(ln):
                return ln, True
        return None, False
    raise ValueError(f"unknown task family {task.family!r}")


_LARK = None


def grammar_accepts(text: str) -> bool:
    """Whether LIST_GRAMMAR's language (by lark's own Earley parser) contains ``text``."""
    global _LARK
    import lark

    if _LARK is None:
        _LARK = lark.Lark(LIST_GRAMMAR, parser="earley", lexer="dynamic_complete")
    try:
        _LARK.parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


def gold_text(task: Task) -> str:
    """A constraint-satisfying text whose answer is the gold (compact JSON for json tasks)."""
    if task.family == "json":
        return json.dumps(task.gold, separators=(",", ":"))
    if task.family == "regex":
        return task.gold
    return ", ".join(task.gold)


#: The Ada persona task: "Describe a person named Ada, aged 36, ..." with three required fields, 48
#: tokens. Scored on the two fields the prompt fixes (name and age); hobbies are free.
ADA = Task(
    "ada", "json", "Describe a person named Ada, aged 36, who likes math and music, as JSON.",
    {"name": "Ada", "age": 36},
    schema={"type": "object", "required": ["name", "age", "hobbies"], "additionalProperties": False,
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                           "hobbies": {"type": "array", "items": {"type": "string"}}}},
    max_tokens=48,
)
