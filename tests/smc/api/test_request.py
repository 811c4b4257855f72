"""``smc.Request``: one validated value per generation, its defaults, its JSON form, and the
entry points that build it (generate, the CLI, checkpoints)."""

import dataclasses
import json

import pytest

import smc
from potentials import JSONSchema, Predicate, Regex
from smc.api.request import JSON_FIELDS, SETTINGS, Request, constraint_from_json
from smc.core import defaults
from smc.engine.checkpoint import read_header
from tests.smc.api.test_generate import toy


def test_defaults_are_resolved_once_from_the_defaults_module():
    r = Request("hi", Regex("[0-9]+"))
    assert (r.particles, r.max_tokens, r.seed, r.sampler) == (
        defaults.PARTICLES, defaults.MAX_TOKENS, defaults.SEED, defaults.SAMPLER)
    assert (r.ess_threshold, r.resampling, r.finish_share) == (
        defaults.ESS_THRESHOLD, defaults.RESAMPLING, defaults.FINISH_SHARE)
    assert r.islands == defaults.islands_for(defaults.PARTICLES) == 2
    assert r.lookahead == defaults.LOOKAHEAD  # a byte-level constraint in an SMC run
    assert Request("hi").lookahead == 0.0 and Request("hi", particles=8).islands == 1
    assert Request("hi", Regex("a"), method="beam").lookahead == 0.0
    assert Request("hi", method="steer").n_beam == defaults.N_BEAM
    assert r.sampler_options == {"max_checks": 64, "max_draws": 256, "early_fallback": 8,
                                 "early_fallback_permille": 50}


def test_a_request_is_frozen_and_replace_validates_again():
    r = Request("hi", particles=8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.particles = 4
    assert r.replace(particles=32).islands == 4  # a default is resolved again
    assert r.replace(islands=2).replace(particles=32).islands == 2  # a given value is kept
    with pytest.raises(smc.InvalidArgument, match="islands=3 must divide particles=8"):
        r.replace(islands=3)


@pytest.mark.parametrize("fields, exc, msg", [
    (dict(particles=0), ValueError, "particles must be an integer >= 1"),
    (dict(max_tokens=2.5), ValueError, "max_tokens must be an integer >= 1"),
    (dict(sampler="fast"), ValueError, "unknown sampler 'fast'"),
    (dict(sampler_options={"max_tries": 3}), ValueError, "unknown option 'max_tries' of the AWRSSampler"),
    (dict(sampler_options={"max_checks": -1}), ValueError, "max_checks must be an integer >= 0"),
    (dict(sampler="direct", sampler_options={"max_checks": 3}), ValueError, "its options: none"),
    (dict(method="greedy"), ValueError, "method must be one of"),
    (dict(n_beam=2), ValueError, "n_beam is only used by method='steer'"),
    (dict(islands=2, method="beam"), ValueError, "islands is for method='smc' runs"),
    (dict(finish_share=1.0), ValueError, "finish_share must be in [0, 1)"),
    (dict(lookahead=float("nan")), ValueError, "lookahead must be a finite number >= 0"),
    (dict(critic=3), TypeError, "critic must be a function"),
    (dict(chat="yes"), TypeError, "chat must be True, False or None"),
    (dict(model=3), TypeError, "model must be a string"),
    (dict(constraint={"regex": "a", "grammar": "b"}), ValueError, "exactly one kind"),
    (dict(constraint={"xml": "a"}), ValueError, "unknown constraint kind 'xml'"),
    (dict(constraint={"choice": []}), ValueError, "Choice needs at least one option"),
    (dict(constraint={"json_schema": "{not json"}), ValueError, "not valid JSON"),
    (dict(constraint={"segments": []}), ValueError, "non-empty list"),
    (dict(constraint={"segments": [{"free_text": {}}, {"text": "x"}]}), ValueError, "without a stop"),
    (dict(constraint={"segments": [{"xml": 1}]}), ValueError, "unknown key 'xml'"),
    (dict(constraint={"structural_tag": {"format": {"type": "or"}}}), ValueError, "format.type must be one of"),
    (dict(constraint={"structural_tag": {"structures": [{"begin": "<f>", "end": "</f>"}],
                                         "triggers": ["<g"]}}), ValueError, "starts with none of the triggers"),
    (dict(constraint={"tools": {"tools": [], "tool_choice": "auto"}}), ValueError, "tools must be a non-empty list"),
    (dict(constraint={"tools": {"tools": [{"type": "function", "function": {"name": "f"}}],
                                "tool_choice": {"type": "function", "function": {"name": "g"}}}}),
     ValueError, "not among the tools"),
    (dict(constraint={"reasoning": {"max_bytes": -1}}), ValueError, "max_bytes must be an int >= 0"),
    (dict(constraint={"reasoning": {"answer": {"regex": "("}}}), ValueError, "reasoning.answer.regex"),
])
def test_each_bad_field_is_one_clear_error_of_the_library(fields, exc, msg):
    with pytest.raises(exc, match=None) as info:
        Request("hi", **fields)
    assert msg in str(info.value)
    assert isinstance(info.value, smc.SmcSteerError)


def test_json_round_trip_with_every_constraint_kind():
    for spec in [{"regex": "[0-9]{3}"}, {"grammar": 'start: "a" | "b"'},
                 {"json_schema": {"type": "object", "properties": {"a": {"type": "integer"}}}},
                 {"json_object": True}, {"choice": ["yes", "no", "a.b"]}, *NEW_KINDS, None]:
        r = Request.from_json({"prompt": "hi", "constraint": spec, "particles": 8, "seed": 3,
                               "sampler_options": {"max_checks": 5}})
        out = r.to_json()
        assert out["constraint"] == spec and "python_only" not in out
        again = Request.from_json(json.dumps(out))
        assert again.to_json() == out
        assert set(out) == set(JSON_FIELDS)


TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"], "additionalProperties": False}}},
         {"type": "function", "function": {"name": "echo", "parameters": {
             "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}]
#: one example of each constraint kind built by potentials.segments.forms
NEW_KINDS = [
    {"segments": [{"free_text": {"stop": "<answer>", "max_bytes": 40}},
                  {"json_schema": {"type": "integer"}}, {"text": "</answer>"}]},
    {"structural_tag": {"type": "structural_tag", "triggers": ["<function="],
                        "structures": [{"begin": "<function=add>", "schema": TOOLS[0]["function"]["parameters"],
                                        "end": "</function>"}]}},
    {"structural_tag": {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<function="], "at_least_one": True, "stop_after_first": True,
        "tags": [{"type": "tag", "begin": "<function=add>", "end": "</function>",
                  "content": {"type": "json_schema", "json_schema": TOOLS[0]["function"]["parameters"]}}]}}},
    {"tools": {"tools": TOOLS, "tool_choice": "required"}},
    {"reasoning": {"answer": {"choice": ["yes", "no"]}, "max_bytes": 20}},
]


async def test_new_constraint_kinds_mean_what_they_say():
    cases = [  # (text, accepted as a whole, a viable prefix)
        [(b"x y<answer>12</answer>", True, True), (b"x<answer>1a", False, False),
         (b"x" * 41, False, False), (b"x" * 40 + b"<ans", False, True)],
        [(b'hi <function=add>{"a": 1, "b": 2}</function> bye', True, True),
         (b"hi <function=mul", False, False), (b"hi", True, True)],
        [(b'hi <function=add>{"a": 1, "b": 2}</function>', True, True),
         (b'hi <function=add>{"a": 1, "b": 2}</function> bye', False, False), (b"hi", False, True)],
        [(b'<tool_call>{"name": "echo", "arguments": {"text": "a"}}</tool_call>', True, True),
         (b'<tool_call>{"name": "add", "arguments": {"text"', False, False),
         (b'<tool_call>{"name": "mul', False, False), (b"no call", False, False), (b"\n<tool_call>{\"name\": \"add", False, True)],
        [(b"<think>hmm</think>yes", True, True), (b"<think>" + b"h" * 21, False, False),
         (b"<think>hmm</think>maybe", False, False), (b"<think>hmm</think>n", False, True)],
    ]
    for spec, texts in zip(NEW_KINDS, cases):
        pot = constraint_from_json(spec)
        for text, whole, viable in texts:
            assert (await pot.complete(text) == 0.0) == whole, (spec, text)
            assert (await pot.prefix(text) == 0.0) == viable, (spec, text)
    assert constraint_from_json({"tools": {"tools": TOOLS, "tool_choice": "none"}}) is None


async def test_json_constraints_mean_what_they_say():
    choice = constraint_from_json({"choice": ["yes", "no", "a.b"]})
    assert [await choice.complete(s) for s in (b"yes", b"no", b"a.b", b"axb", b"ye")] == [0.0, 0.0, 0.0, -float("inf"), -float("inf")]
    obj = constraint_from_json({"json_object": True})
    assert await obj.complete(b'{"x": [1]}') == 0.0 and await obj.complete(b"[1]") == -float("inf")


def test_python_only_parts_are_named_not_written():
    r = Request("hi", Predicate(lambda s: True), critic=lambda p: 0.0)
    out = r.to_json()
    assert out["python_only"] == ["constraint", "critic"] and "constraint" not in out
    with pytest.raises(smc.InvalidArgument, match="unknown request field 'critic' \\(it can only be set in Python\\)"):
        Request.from_json({"prompt": "hi", "critic": None})
    with pytest.raises(smc.InvalidArgument, match="the request has no prompt"):
        Request.from_json({"particles": 4})
    with pytest.raises(smc.InvalidArgument, match="not valid JSON"):
        Request.from_json("{")


def test_generate_takes_a_request_or_its_fields_and_gives_the_same_result():
    kw = dict(particles=4, max_tokens=5, seed=2)
    a = smc.generate("", Regex("[12]+"), lm=toy(), progress=False, **kw)
    b = smc.generate(Request("", Regex("[12]+"), **kw), lm=toy(), progress=False)
    c = smc.generate("", {"regex": "[12]+"}, lm=toy(), progress=False, **kw)
    assert a.samples == b.samples == c.samples and a.log_ml == b.log_ml == c.log_ml
    with pytest.raises(smc.InvalidArgument, match="give either a Request or its fields"):
        smc.generate(Request(""), particles=4, lm=toy())
    with pytest.raises(TypeError, match="unknown setting 'particle'"):
        smc.generate("", particle=4, lm=toy())
    assert set(SETTINGS) >= {"particles", "sampler_options", "critic", "checkpoint"}


def test_awrs_options_reach_the_sampler():
    """max_checks=0 sends every AWRS step to its exact fallback: the stats say so."""
    kw = dict(lm=toy(), particles=4, max_tokens=4, seed=1, progress=False)
    plain = smc.generate("", Regex("[12]+"), **kw)
    forced = smc.generate("", Regex("[12]+"), sampler_options={"max_checks": 0}, **kw)
    fallbacks = lambda r: sum(d.get("fallbacks", 0) for d in r.stats["samplers"].values())  # noqa: E731
    assert fallbacks(forced) > fallbacks(plain)


def test_a_checkpoint_holds_the_request_and_resumes_from_it(tmp_path):
    path = tmp_path / "run.ckpt"
    kw = dict(lm=toy(), particles=4, max_tokens=5, seed=4, progress=False)
    full = smc.generate("", {"regex": "[12a-]*"}, sampler_options={"max_checks": 3}, **kw)
    smc.generate("", {"regex": "[12a-]*"}, sampler_options={"max_checks": 3}, checkpoint=path, **kw)
    header = read_header(path)
    assert header["program"]["request"]["sampler_options"]["max_checks"] == 3
    assert header["program"]["request"]["constraint"] == {"regex": "[12a-]*"}
    again = smc.resume(path, lm=toy(), progress=False)
    assert again.samples == full.samples and again.log_ml == full.log_ml


def test_a_checkpoint_of_the_previous_format_is_refused_naming_it(tmp_path):
    path = tmp_path / "old.ckpt"
    smc.generate("", Regex("[12]+"), lm=toy(), particles=2, max_tokens=3, checkpoint=path, progress=False)
    data = path.read_bytes()
    marker, header, rest = data.split(b"\n", 2)
    old = json.loads(header)
    old.update(format_version=1, smc_steer="0.1.0")
    path.write_bytes(marker + b"\n" + json.dumps(old).encode() + b"\n" + rest)
    with pytest.raises(smc.CheckpointError, match=r"smc-steer 0\.1\.0 \(checkpoint format 1\)"):
        smc.resume(path, lm=toy())


def test_json_schema_constraint_parses_results():
    r = smc.generate("", {"json_schema": {"type": "boolean"}}, lm=toy(), particles=2, max_tokens=3,
                     progress=False)
    assert isinstance(r.constraint, JSONSchema)


def test_per_byte_twist_is_on_for_an_smc_or_beam_run_under_a_json_schema():
    """defaults.PER_BYTE for an SMC run under a JSONSchema, in one population or in islands,
    and for beam search under one (where it ranks the beams), else 0; a given rate is kept,
    re-resolved on replace when it was the default, and refused where it cannot act."""
    schema = JSONSchema({"type": "object"})
    assert Request("hi", schema, particles=8).per_byte == defaults.PER_BYTE
    assert Request("hi", schema, particles=16).islands == 2
    assert Request("hi", schema, particles=16).per_byte == defaults.PER_BYTE
    assert Request("hi", schema, particles=16, islands=1).per_byte == defaults.PER_BYTE
    assert Request("hi", Regex("a+"), particles=8).per_byte == 0.0
    assert Request("hi", schema, particles=8, sampler="masking").per_byte == 0.0
    assert Request("hi", schema, particles=8, critic=lambda p: 0.0).per_byte == 0.0
    assert Request("hi", schema, particles=8, method="beam").per_byte == defaults.PER_BYTE
    assert Request("hi", Regex("a+"), particles=8, method="beam").per_byte == 0.0
    assert Request("hi", schema, particles=8, method="top_k").per_byte == 0.0
    assert Request("hi", schema, particles=8, method="steer").per_byte == 0.0
    assert Request("hi", Regex("a+"), method="beam", per_byte=0.3).per_byte == 0.3
    assert Request("hi", {"json_schema": {"type": "object"}}, particles=4).per_byte == defaults.PER_BYTE
    r = Request("hi", schema, particles=8)
    assert r.replace(constraint=Regex("a+")).per_byte == 0.0
    assert Request("hi", Regex("a+"), per_byte=0.3).per_byte == 0.3
    as_json = Request("hi", {"json_schema": {"type": "object"}}, particles=8).to_json()
    assert as_json["per_byte"] == defaults.PER_BYTE and Request.from_json(as_json).per_byte == defaults.PER_BYTE
    for bad, match in ((dict(per_byte=-1.0), "per_byte must be a finite number"),
                       (dict(per_byte=0.5, method="top_k"), "per_byte is for method='smc' or 'beam'"),
                       (dict(per_byte=0.5, method="steer"), "per_byte is for method='smc' or 'beam'"),
                       (dict(per_byte=0.5, critic=lambda p: 0.0), "give per_byte or critic")):
        with pytest.raises(ValueError, match=match):
            Request("hi", schema, **bad)
    with pytest.raises(ValueError, match="per_byte needs a byte-level constraint"):
        Request("hi", None, per_byte=0.5)


def test_resampling_power_is_below_1_under_a_json_schema():
    """defaults.RESAMPLING_POWER for an SMC run under a JSONSchema at every N, else 1; a given
    power is kept, checked to lie in (0, 1], and refused (other than 1) by the methods that do
    not resample."""
    schema = JSONSchema({"type": "object"})
    assert defaults.RESAMPLING_POWER < 1
    for n in (1, 4, 16, 64):
        assert Request("hi", schema, particles=n).resampling_power == defaults.RESAMPLING_POWER
    assert Request("hi", Regex("a+"), particles=8).resampling_power == 1.0
    assert Request("hi", schema, particles=8, sampler="masking").resampling_power == 1.0
    assert Request("hi", schema, particles=8, method="beam").resampling_power == 1.0
    assert Request("hi", Regex("a+"), particles=8, resampling_power=0.3).resampling_power == 0.3
    r = Request("hi", schema, particles=8)
    assert r.replace(particles=64).resampling_power == defaults.RESAMPLING_POWER
    assert r.replace(constraint=Regex("a+")).resampling_power == 1.0
    as_json = Request("hi", {"json_schema": {"type": "object"}}, particles=8).to_json()
    assert as_json["resampling_power"] == defaults.RESAMPLING_POWER
    assert Request.from_json(as_json).resampling_power == defaults.RESAMPLING_POWER
    for bad in (0, 0.0, -0.5, 1.5, float("nan"), True, "half"):
        with pytest.raises(ValueError, match="resampling_power must be a number in \\(0, 1\\]"):
            Request("hi", schema, resampling_power=bad)
    with pytest.raises(ValueError, match="resampling_power is for method='smc' runs"):
        Request("hi", schema, method="beam", resampling_power=0.5)


async def test_the_run_resamples_by_the_power_its_request_names(monkeypatch):
    """generate passes the request's resolved power to the SMC loop."""
    import smc.api.generation as generation

    seen = []
    real = generation.smc

    async def spy(*args, resampling_power=1.0, **kw):
        seen.append(resampling_power)
        return await real(*args, resampling_power=resampling_power, **kw)

    monkeypatch.setattr(generation, "smc", spy)
    schema = JSONSchema({"type": "boolean"})
    for settings in ({}, {"resampling_power": 0.5}, {"resampling_power": 1}):
        await smc.agenerate("", schema, lm=toy(), **{"particles": 4, **settings}, max_tokens=6, progress=False)
    await smc.agenerate("", Regex("true|false"), lm=toy(), particles=4, max_tokens=6, progress=False)
    assert seen == [defaults.RESAMPLING_POWER, 0.5, 1.0, 1.0]


@pytest.mark.parametrize("method, runner", [("smc", "smc"), ("beam", "run_search")])
def test_the_run_gets_the_budget_twist_its_request_names(monkeypatch, method, runner):
    """The SMC loop, or beam search (its ranking), gets BudgetCritic(per_byte) by default under
    a JSONSchema, nothing with per_byte=0, and a critic of one's own as given; top_k none."""
    import smc.api.generation as generation
    from smc.engine.critics import BudgetCritic

    seen = []
    real = getattr(generation, runner)

    async def spy(*args, critic=None, **kw):
        seen.append(critic)
        return await real(*args, critic=critic, **kw)

    monkeypatch.setattr(generation, runner, spy)
    schema = JSONSchema({"type": "boolean"})
    own = lambda p: 0.0  # noqa: E731
    for settings in ({}, {"per_byte": 0.0}, {"critic": own}):
        smc.generate("", schema, lm=toy(), particles=4, max_tokens=6, method=method, progress=False, **settings)
    assert isinstance(seen[0], BudgetCritic) and seen[0].per_byte == defaults.PER_BYTE
    assert seen[1] is None and seen[2] is own
    # it protects begun literals in runs of few particles only (defaults.HOLD_LITERALS_BELOW)
    assert seen[0].hold_literals is (4 < defaults.HOLD_LITERALS_BELOW)
    smc.generate("", schema, lm=toy(), particles=defaults.HOLD_LITERALS_BELOW, max_tokens=6, method=method,
                 progress=False)
    assert seen[3].hold_literals is False
    if runner == "run_search":
        smc.generate("", schema, lm=toy(), particles=2, max_tokens=6, method="top_k", progress=False)
        assert seen[4] is None


async def test_temperature_zero_falls_back_to_beams_ranked_by_the_twist(monkeypatch):
    """Where the exact search exceeds its budget, temperature 0's beam search under a JSONSchema
    is ranked by the budget twist (the request's per_byte, resolved again for method="beam");
    under a regex, plainly."""
    import smc.api.generation as generation
    from smc.engine.critics import BudgetCritic

    seen = []
    real = generation.run_search

    async def spy(model, method, *args, critic=None, **kw):
        seen.append((method, critic))
        return await real(model, method, *args, critic=critic, **kw)

    monkeypatch.setattr(generation, "run_search", spy)
    monkeypatch.setattr(defaults, "TOP1_MAX_EXPANSIONS", 1)
    for constraint in (JSONSchema({"type": "integer", "minimum": 100}), Regex("[12]{3,}")):
        result, how = await generation.arun_most_probable(Request("", constraint, max_tokens=6), toy())
        assert how == "beam" and int(result.best) >= 100
    (m0, c0), (m1, c1), (m2, c2), (m3, c3) = seen
    assert (m0, c0, m2, c2) == ("top_k", None, "top_k", None)
    assert m1 == "beam" and isinstance(c1, BudgetCritic) and c1.per_byte == defaults.PER_BYTE
    assert m3 == "beam" and c3 is None


async def test_strict_beside_json_schema_in_the_json_form():
    """{"json_schema": S, "strict": true}: S's open objects closed; kept by to_json/from_json."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    r = Request("hi", {"json_schema": schema, "strict": True})
    assert r.constraint.strict and await r.constraint.complete(b'{"a": 1, "b": 2}') == -float("inf")
    again = Request.from_json(r.to_json())
    assert again.constraint.strict and again.constraint_json == {"json_schema": schema, "strict": True}
    assert not Request("hi", {"json_schema": schema}).constraint.strict
    with pytest.raises(smc.InvalidArgument, match="constraint.strict applies to a json_schema constraint, not tools"):
        Request("hi", {"tools": {"tools": TOOLS}, "strict": True})
    with pytest.raises(smc.InvalidArgument, match="a constraint has exactly one kind, got 0"):
        Request("hi", {"strict": True})
