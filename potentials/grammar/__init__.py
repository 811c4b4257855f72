"""The Lark grammar constraint family.

    earley.py      an Earley recognizer over the grammar's terminals, each a byte DFA, whose
                   chart columns are the incremental states
    potential.py   the ``Grammar`` potential: a Lark grammar translated to that recognizer
"""

from potentials.grammar.potential import Grammar

__all__ = ["Grammar"]
