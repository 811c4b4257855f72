"""Write the research notebooks (outputs cleared) from the cell sources below.

The .ipynb files are generated: edit the cells here, then run

    .venv/bin/python notebooks/build_notebooks.py

tests/test_notebooks.py executes every notebook and checks that the committed files match this
script's output.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent


def md(text: str):
    return ("md", text)


def code(text: str):
    return ("code", text)


# ---------------------------------------------------------------------------------------------
QUICKSTART = [
    md("""# 01 · Quickstart: constrained generation by SMC

`smc.generate(prompt, constraint=..., lm=...)` samples from the *global* constrained
distribution

$$\\pi(x) = \\frac{p(x \\mid \\text{prompt})\\,\\phi(x)}{Z},\\qquad Z = \\sum_x p(x\\mid\\text{prompt})\\,\\phi(x)$$

with N particles, and returns a `Result`: weighted samples, the posterior over distinct texts,
and $\\log \\hat Z$ (an unbiased estimate of $Z$ in $\\hat Z$). This notebook runs on the
embedded model (SmolLM2-135M-Instruct, CPU) with few particles and short outputs so that it
finishes in about a minute."""),
    code("""import json
import re
import tempfile
from pathlib import Path

import smc
from potentials import Grammar, JSONSchema, Regex

lm = smc.load_lm()  # the embedded default model, offline
len(lm.vocab), lm.eos_token_ids"""),
    md("""## A regular expression
The constraint is a `Regex`: the whole output must match it. Tokens are checked against the
pattern's byte automaton as they are generated."""),
    code("""phone = Regex(r"[0-9]{3}-[0-9]{3}-[0-9]{4}")
r = smc.generate("Give me a US phone number.", constraint=phone, lm=lm,
                 particles=6, max_tokens=16, seed=0, progress=False)
r"""),
    md("""## Reading a Result
- `r.samples`: the N final particles (`text`, `token_ids`, `log_weight`, `finished`);
- `r.weights`: their normalized weights (unfinished particles get 0);
- `r.posterior`: normalized weight of each distinct finished text, most probable first;
- `r.log_ml`: $\\log \\hat Z$; `r.ess`: effective sample size of the final weights;
- `r.best`: the most probable text; `r.stats`: steps, resampling events, LM calls, time;
- `r.history`: one record per step (tokens added, weights, ESS, ancestors) — the genealogy."""),
    code("""for s, w in zip(r.samples, r.weights):
    print(f"{w:6.3f}  finished={s.finished!s:5}  log_w={s.log_weight:8.3f}  {s.text!r}")
print("posterior:", r.posterior)
print("log Z-hat:", r.log_ml, " ESS:", r.ess, " best:", r.best)
{k: r.stats[k] for k in ("steps", "resampling_events", "tokens", "lm_forward_passes", "wall_time_s")}"""),
    code("""assert all(re.fullmatch(phone.pattern, s.text) for s in r.finished)
r.plot();"""),
    md("""`r.to_html(path, lm=lm)` writes one self-contained HTML page (no network) with the
particle genealogy step by step: open it in any browser, drag the slider, hover a node, click it
to highlight its lineage."""),
    code("""page = r.to_html(Path(tempfile.gettempdir()) / "smc_quickstart.html", lm=lm)
print(page, page.stat().st_size, "bytes")"""),
    md("""## A Lark grammar
Any grammar in [Lark](https://lark-parser.readthedocs.io) syntax; a prefix stays alive exactly
when some continuation parses."""),
    code("""arith = Grammar(r'''
start: expr
?expr: term | expr " + " term | expr " - " term
?term: NUMBER | term " * " NUMBER | "(" expr ")"
NUMBER: /[0-9]{1,3}/
''')
r = smc.generate("Write a short arithmetic expression.", constraint=arith, lm=lm,
                 particles=4, max_tokens=12, seed=0, progress=False)
print(r)
for text, p in r.posterior.items():
    print(f"{p:.3f}  {text!r}  = {eval(text)}")"""),
    md("""## A JSON Schema
Draft 2020-12; structure is enforced while the document is generated and every finished
sample is validated by `jsonschema`."""),
    code("""schema = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
r = smc.generate("Describe a person as JSON with a name and an age.", constraint=JSONSchema(schema),
                 lm=lm, particles=4, max_tokens=20, seed=0, progress=False)
print(r)
import jsonschema
for s in r.finished:
    jsonschema.validate(json.loads(s.text), schema)
    print(s.text)"""),
    md("""Next: [02_why_smc](02_why_smc.ipynb) shows on an exact toy problem why the weights
matter; [03_programs](03_programs.ipynb) writes constraints as programs;
[04_json_and_grammars](04_json_and_grammars.ipynb) compares the token samplers."""),
]

# ---------------------------------------------------------------------------------------------
WHY_SMC = [
    md("""# 02 · Why SMC: the exact picture on a toy model

Masking ("locally constrained decoding") removes forbidden tokens and renormalizes at every
step. That samples from

$$q(x) = \\prod_t \\frac{p(x_t \\mid x_{<t})\\,1[x_{\\le t}\\text{ viable}]}{\\sum_a p(a \\mid x_{<t})\\,1[x_{<t}a\\text{ viable}]}$$

which is **not** the constrained distribution $\\pi(x) \\propto p(x)\\,\\phi(x)$: the
denominators (the local masses) differ between prefixes. SMC keeps them as importance
weights and resamples, so its weighted output converges to $\\pi$ as the number of particles
$N$ grows, and the mean weight $\\hat Z$ is an unbiased estimate of $Z$ at every $N$.

Here the language model is a tiny `ToyLM` whose target we can enumerate exactly."""),
    code("""import itertools
import math

import matplotlib.pyplot as plt
import numpy as np

import smc
from potentials import Regex

def next_token_probs(ids):
    # the model loves "a", and after an "a" it wants another one
    return [0.8, 0.1, 0.1] if ids and ids[-1] == 0 else [0.6, 0.3, 0.1]

lm = smc.ToyLM(["a", "b", "$"], "$", next_token_probs)   # "$" is EOS
no_aa = Regex(r"b*(ab+)*a?")                              # constraint: never two a's in a row
T = 4                                                     # at most T tokens before EOS"""),
    md("""## The exact target
$\\pi(x) \\propto p(x, \\text{EOS})\\,\\phi(x)$ over strings of at most $T$ tokens, by
enumeration."""),
    code("""import re

def p_seq(x):
    ids = ["ab".index(c) for c in x]
    lp = sum(math.log(next_token_probs(tuple(ids[:k]))[ids[k]]) for k in range(len(ids)))
    return math.exp(lp) * next_token_probs(tuple(ids))[2]

strings = ["".join(t) for n in range(T + 1) for t in itertools.product("ab", repeat=n)]
target = {x: p_seq(x) for x in strings if re.fullmatch(no_aa.pattern, x)}
Z = sum(target.values())
pi = {x: w / Z for x, w in sorted(target.items(), key=lambda kv: -kv[1])}
print(f"Z = {Z:.5f} over {len(pi)} strings")"""),
    md("""## What each method outputs
The *output law* of a method is $E\\left[\\sum_i \\bar w_i\\,\\delta_{x_i}\\right]$: the
distribution of a string drawn from its weighted particles. We estimate it from many seeded
runs (about 2,048 particles per method, at least 64 runs) and also record $\\hat Z$ of every run. Masking ignores
the weights (it is improper), so we run it with one particle per run."""),
    code("""async def output_law(sampler, n, particles_total=2048):
    reps = max(particles_total // n, 64)
    law, z_hats = {}, []
    for seed in range(reps):
        r = await smc.agenerate("", constraint=no_aa, lm=lm, particles=n, max_tokens=T,
                                sampler=sampler, seed=seed, progress=False)
        z_hats.append(math.exp(r.log_ml))
        for s, w in zip(r.samples, r.weights):
            law[s.text] = law.get(s.text, 0.0) + w / reps
    return law, np.array(z_hats)

def tv(p, q):
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))

masking, _ = await output_law("masking", 1)
laws, zs = {}, {}
for n in (1, 4, 16, 64):
    laws[n], zs[n] = await output_law("direct", n)
print("TV(masking, pi) =", round(tv(masking, pi), 3))
for n in laws:
    print(f"TV(SMC N={n:2d}, pi) = {tv(laws[n], pi):.3f}")"""),
    code("""labels = list(pi)[:12]
panels = [("masking", masking)] + [(f"SMC, N = {n}", laws[n]) for n in laws]
fig, axes = plt.subplots(1, len(panels), figsize=(18, 3.6), sharey=True)
x = np.arange(len(labels))
for ax, (name, law) in zip(axes, panels):
    ax.bar(x, [law.get(s, 0.0) for s in labels], color="tab:blue", alpha=0.7, label=name)
    ax.bar(x, [pi[s] for s in labels], fill=False, edgecolor="black", lw=1.2, label="exact π")
    ax.set_xticks(x, [s or "ε" for s in labels], rotation=90, fontsize=8)
    ax.set_title(f"{name}\\nTV = {tv(law, pi):.3f}")
axes[0].set_ylabel("probability")
axes[0].legend(fontsize=8)
fig.tight_layout()"""),
    md("""With one particle SMC *is* masking (a single weight normalizes to 1). Masking's error
is visible: after an "a" the model puts 80% of its mass on the forbidden "a", and masking hands
that mass to "b" and EOS, so strings through "a" come out too often. The target instead
discounts them by the mass that was forbidden; the empty string, which never needed a
correction, has $\\pi = 0.41$ while masking gives it only $p(\\text{EOS}) = 0.1$. As $N$ grows
the weights correct this and the bars match the exact target.

## $\\hat Z$ against the exact $Z$
$E[\\hat Z] = Z$ at every $N$; only the spread shrinks. ($\\log \\hat Z$ is biased low, by
Jensen's inequality, which is why we average $\\hat Z$, not its log.)"""),
    code("""fig, ax = plt.subplots(figsize=(7, 3.6))
ns = list(zs)
ax.violinplot([zs[n] for n in ns], positions=range(len(ns)), showextrema=False)
means = [zs[n].mean() for n in ns]
ses = [zs[n].std() / math.sqrt(len(zs[n])) for n in ns]
ax.errorbar(range(len(ns)), means, yerr=[3 * s for s in ses], fmt="o", color="tab:red",
            capsize=4, label="mean Ẑ ± 3 SE")
ax.axhline(Z, color="black", ls="--", label=f"exact Z = {Z:.4f}")
ax.set_xticks(range(len(ns)), [f"N = {n}" for n in ns])
ax.set_ylabel("Ẑ per run")
ax.legend()
for n, m, s in zip(ns, means, ses):
    print(f"N={n:2d}: mean Ẑ = {m:.4f} ± {s:.4f} (SE), {len(zs[n])} runs; |mean - Z| / SE = {abs(m - Z) / s:.2f}")"""),
    code("""# the claims of this notebook, checked (they fail loudly if the sampler were improper)
assert tv(masking, pi) > 0.3 and tv(laws[64], pi) < tv(masking, pi) / 4
assert all(abs(zs[n].mean() - Z) < 4 * zs[n].std() / math.sqrt(len(zs[n])) for n in zs)"""),
]

# ---------------------------------------------------------------------------------------------
PROGRAMS = [
    md("""# 03 · Constraints as programs: writing an `smc.Model`

A constraint does not have to be a regex or a grammar. An `smc.Model` is a small probabilistic
program for **one particle**: `async def step(self)` extends it by one token, and its primitives
change its weight:

- `await self.sample(dist)` draws a value (an LM token, possibly under a constraint) and
  multiplies the weight by the sampler's importance weight;
- `self.condition(ok)` sets the weight to 0 when `ok` is false; `self.score(logw)` multiplies it
  by `exp(logw)`;
- `self.finish()` stops the particle.

The engine `smc.smc(model, N)` runs N copies, resamples when the effective sample size drops
below half of N, and returns the same `Result` as `smc.generate`. Both programs below run on the
embedded model. Their script versions in `examples/` go further: `short_words.py` puts the
word-length rule into the token sampler (a `Predicate` sampled with AWRS, so no particle dies)
and forces EOS with its proper weight; `acrostic_story.py` makes sentence k start with the k-th
letter of a word and steers resampling with a twist."""),
    code("""import re

import matplotlib.pyplot as plt
import numpy as np

import smc
from potentials import Predicate
from smc import LMContext

lm = smc.load_lm()"""),
    md("""## Program 1: every word has at most 5 letters
Sample each token from the model, then *condition*: a particle whose text has a word longer than
5 letters gets weight 0. That is a particle filter with the LM as proposal; resampling replaces
the dead particles by copies of live ones. (To stay fast, both programs simply stop after
`max_tokens` tokens: a cut-off text counts as finished, so the target is over texts that end with
EOS *or* reach that length.)"""),
    code("""class ShortWords(smc.Model):
    def __init__(self, lm, prompt, max_tokens=16, max_letters=5):
        super().__init__()
        self.context = LMContext(lm, prompt, chat=True)
        self.max_tokens, self.max_letters = max_tokens, max_letters

    async def step(self):
        await self.sample(self.context.next_token())       # p(token | prompt, text so far)
        words = re.findall(r"[A-Za-z]+", self.context.text())
        self.condition(all(len(w) <= self.max_letters for w in words))
        if self.context.done or len(self.context.tokens) >= self.max_tokens:
            self.finish()

short = await smc.smc(ShortWords(lm, "Tell me about the sea in one sentence."), 8, seed=0,
                      progress=False)
print(short)
for text, p in list(short.posterior.items())[:4]:
    print(f"{p:.3f}  {text!r}")"""),
    code("""assert all(len(w) <= 5 for s in short.finished for w in re.findall(r"[A-Za-z]+", s.text))
short.plot();"""),
    md("""## Program 2: every sentence starts with a given letter
Here conditioning after the fact would kill almost every particle at each sentence start.
Instead the constraint goes *into* the token distribution: `next_token(constraint=...)` with
a `Predicate` on the text so far, sampled with AWRS, which draws from the model restricted to
allowed tokens and returns the right importance weight (the model's mass of allowed tokens,
estimated without bias)."""),
    code("""def sentences_start_with(letter):
    \"\"\"Text whose first character, and first character after each '.', '!' or '?' and
    whitespace, is `letter` (either case). Once false it stays false: a valid prefix check.\"\"\"
    def ok(text):
        text = text.lstrip()
        starts = ([text[0]] if text else []) + re.findall(r"[.!?]\\s+(\\S)", text)
        return all(c.upper() == letter.upper() for c in starts)
    return Predicate(ok, prefix=ok)


class Acrostic(smc.Model):
    def __init__(self, lm, prompt, letter, max_tokens=20):
        super().__init__()
        self.context = LMContext(lm, prompt, chat=True)
        self.constraint = sentences_start_with(letter)
        self.max_tokens = max_tokens

    async def step(self):
        await self.sample(self.context.next_token(self.constraint, sampler="awrs"))
        if self.context.done or len(self.context.tokens) >= self.max_tokens:
            self.finish()

acro = await smc.smc(Acrostic(lm, "Write two short sentences about cats.", "S"), 8, seed=0,
                     progress=False)
print(acro)
for text, p in list(acro.posterior.items())[:4]:
    print(f"{p:.3f}  {text!r}")"""),
    code("""acro.plot();"""),
    md("""## ESS and resampling, side by side
The ESS after each step (before resampling) and the steps after which the population was
resampled. Program 1 loses particles to `condition` and resamples to replace them; program 2's
weights vary only through the local masses of allowed tokens."""),
    code("""fig, ax = plt.subplots(figsize=(9, 3.5))
for r, name, color in [(short, "ShortWords (condition)", "tab:blue"),
                       (acro, "Acrostic (constrained sampling)", "tab:green")]:
    steps = [h.step for h in r.history]
    ax.plot(steps, [h.ess for h in r.history], "-o", ms=3, color=color, label=name)
    events = [h for h in r.history if h.ancestors is not None]
    ax.plot([h.step for h in events], [h.ess for h in events], "v", ms=9, color=color,
            markeredgecolor="red", label=f"{name}: {len(events)} resamplings")
ax.axhline(8, color="gray", ls="--", lw=1)
ax.axhline(4, color="gray", ls=":", lw=1, label="threshold N/2")
ax.set_xlabel("step"); ax.set_ylabel("ESS"); ax.set_ylim(0, 8.5); ax.legend(fontsize=8)
fig.tight_layout()"""),
    md("""The genealogy of program 1 as a self-contained HTML page (red links: resampling)."""),
    code("""import tempfile
from pathlib import Path
print(short.to_html(Path(tempfile.gettempdir()) / "smc_short_words.html", lm=lm))"""),
]

# ---------------------------------------------------------------------------------------------
JSON_GRAMMARS = [
    md("""# 04 · JSON Schema and grammars: masking vs direct vs AWRS

Three token samplers, same SMC engine:

| sampler | what it computes per step | weight |
|---|---|---|
| `masking` | the masked, renormalized next-token distribution | none (improper baseline) |
| `direct` | the masked distribution over the **whole** vocabulary | exact local mass |
| `awrs` | draws from the LM, checks only a few tokens | unbiased estimate of the local mass |

We compare validity of the outputs, $\\log \\hat Z$ and wall time on a realistic JSON Schema
and a small SQL grammar. (Masking's $\\log \\hat Z$ is not an estimate of anything: it ignores
the weights.) Particle counts and lengths are small so that the notebook runs on a laptop CPU;
timings are from one run on whatever machine runs it."""),
    code("""import json
import time

import jsonschema
import lark
import matplotlib.pyplot as plt

import smc
from potentials import Grammar, JSONSchema

lm = smc.load_lm()
SAMPLERS = ["masking", "direct", "awrs"]"""),
    md("""## A JSON Schema with nested objects, an array, an enum and a pattern"""),
    code("""schema = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 10},
        "role": {"enum": ["admin", "editor", "viewer"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 2},
        "address": {
            "type": "object",
            "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "role", "address"],
    "additionalProperties": False,
}
def json_valid(text):
    try:
        jsonschema.validate(json.loads(text), schema)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False"""),
    md("""## A small SQL grammar (Lark)
Table and column names come from a known database schema, as in text-to-SQL. (An open
identifier terminal such as `/[a-z_]+/` also works, but then a large share of the 49k-token
vocabulary stays viable at every step, and `direct`/`masking`, which evaluate the whole
vocabulary, get much slower than `awrs`.)"""),
    code("""sql_grammar = r'''
start: "SELECT " columns " FROM " TABLE where? ";"
columns: "*" | COLUMN (", " COLUMN)*
where: " WHERE " COLUMN OP value
TABLE: "users" | "orders"
COLUMN: "name" | "age" | "city" | "total"
OP: " = " | " > " | " < "
value: NUMBER | "'" WORD "'"
NUMBER: /[0-9]{1,4}/
WORD: /[A-Za-z]{1,12}/
'''
sql_parser = lark.Lark(sql_grammar)

def sql_valid(text):
    try:
        sql_parser.parse(text)
        return True
    except lark.LarkError:
        return False"""),
    code("""TASKS = {
    "JSON": ("Give a user record as JSON: name, role, tags and an address with a zip code.",
             lambda: JSONSchema(schema), json_valid, 48),
    "SQL": ("Write a SQL query for the names of users older than 30.",
            lambda: Grammar(sql_grammar), sql_valid, 20),
}
rows = []
for task, (prompt, make_constraint, valid, max_tokens) in TASKS.items():
    for sampler in SAMPLERS:
        # fair timing: every run starts with an empty LM cache and a fresh constraint
        lm.clear_cache()
        constraint = make_constraint()
        t = time.perf_counter()
        r = await smc.agenerate(prompt, constraint, lm=lm, particles=4, max_tokens=max_tokens,
                                sampler=sampler, seed=0, progress=False)
        seconds = time.perf_counter() - t
        ok = sum(s.finished and valid(s.text) for s in r.samples)
        assert all(valid(s.text) for s in r.finished)   # no finished sample is ever invalid
        rows.append(dict(task=task, sampler=sampler, valid=ok / len(r.samples),
                         log_ml=r.log_ml if sampler != "masking" else float("nan"),
                         seconds=seconds, checks=r.stats["constraint_checks"],
                         best=r.best))
print(f"{'task':5} {'sampler':8} {'valid':>6} {'log Ẑ':>8} {'time s':>7} {'checks':>8}  best")
for row in rows:
    print(f"{row['task']:5} {row['sampler']:8} {row['valid']:6.2f} {row['log_ml']:8.2f} "
          f"{row['seconds']:7.1f} {row['checks']:8d}  {row['best']!r}")"""),
    md("""`valid` is the fraction of the N particles that finished with a valid document (a
particle that hits `max_tokens` before the document can end gets weight 0). `checks` counts
single-token constraint checks: `direct` evaluates the whole vocabulary (about 49k tokens) at
every step instead, which AWRS avoids."""),
    code("""fig, axes = plt.subplots(1, 3, figsize=(14, 3.4))
for ax, key, label in zip(axes, ["valid", "log_ml", "seconds"],
                          ["fraction valid", "log Ẑ (masking: n/a)", "wall time (s)"]):
    for k, task in enumerate(TASKS):
        vals = [row[key] for row in rows if row["task"] == task]
        ax.bar([i + 0.38 * k for i in range(len(SAMPLERS))], vals, width=0.38, label=task)
    ax.set_xticks([i + 0.19 for i in range(len(SAMPLERS))], SAMPLERS)
    ax.set_title(label)
axes[0].legend()
fig.tight_layout()"""),
    md("""Reading the table: all three samplers only ever return valid documents; masking's
samples are not weighted, so its output is biased toward prefixes that looked locally likely
(see [02_why_smc](02_why_smc.ipynb)); `direct` and `awrs` target the same distribution and
their $\\log \\hat Z$ estimate the same number (they differ by Monte Carlo noise at N = 4)."""),
]

NOTEBOOKS = {
    "01_quickstart.ipynb": QUICKSTART,
    "02_why_smc.ipynb": WHY_SMC,
    "03_programs.ipynb": PROGRAMS,
    "04_json_and_grammars.ipynb": JSON_GRAMMARS,
}


def build(cells) -> nbformat.NotebookNode:
    """A notebook of these (kind, source) cells with no outputs, for the python3 kernel."""
    nb = new_notebook(
        cells=[new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in cells],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
    )
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"  # stable ids keep regenerated files identical
    return nb


def render(name: str) -> str:
    return nbformat.writes(build(NOTEBOOKS[name])) + "\n"


def main() -> int:
    for name in NOTEBOOKS:
        (HERE / name).write_text(render(name), encoding="utf-8")
        print("wrote", HERE / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
