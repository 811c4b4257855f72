"""The JSON Schema constraint family (Draft 2020-12 and the earlier drafts it reads).

    machine.py     the JSON grammar as an incremental byte machine, with per-value checks
    clauses.py     a schema compiled into the clauses the machine checks while generating
    drafts.py      what differs between drafts: keywords, vocabularies, validators
    patterns.py    ECMA-262 ``pattern``s and ``format``s, searched with a time limit
    formats.py     regular supersets of common ``format``s, enforced while a string is written
    potential.py   the ``JSONSchema`` potential: the machine, and ``jsonschema``'s validator on
                   every finished text
"""

from potentials.json.potential import JSONSchema, JSONState

__all__ = ["JSONSchema", "JSONState"]
