"""One prompt rule (smc.backends.prompts.encode_prompt): text, chat messages and token ids give the
same conditioning ids through generate/agenerate, LMContext (a Model), LMPotential, the samplers
and the CLI; bad prompts get one clear error."""

import asyncio
import json
import zlib

import numpy as np
import pytest

import smc
from potentials import Regex
from potentials.lm import LMPotential
from samplers import make_sampler
from smc import ToyLM
from smc.api import cli
from smc.backends.base import AsyncLM
from smc.backends.prompts import check_messages, encode_prompt
from smc.programs.context import LMContext
from smc.programs.model import Model

VOCAB = ["<s>", "<u>", "<a>", "|", "a", "b", " ", "$"]
TEXT = [VOCAB.index(t) for t in ("a", "b", " ", "$")]


def template(messages):
    """A toy chat template: <s>/<u>/<a> open a turn, | closes it; the reply's turn is opened."""
    return "".join(f"<{m['role'][0]}>{m['content']}|" for m in messages) + "<a>"


class Recorder:
    """next_token_probs of a toy LM that depends on the whole context (a seeded Dirichlet per
    context) and records every context it is asked about."""

    def __init__(self):
        self.seen: list[tuple[int, ...]] = []

    def __call__(self, ids):
        self.seen.append(ids)
        rng = np.random.default_rng(zlib.crc32(repr(ids).encode()))
        p = np.zeros(len(VOCAB))
        p[TEXT] = rng.dirichlet(np.ones(len(TEXT)))
        return p.tolist()

    def prompt(self) -> tuple[int, ...]:
        """The conditioning context: the shortest one the LM was asked about."""
        return min(self.seen, key=len)


def chat_lm(recorder=None):
    return ToyLM(VOCAB, "$", recorder or Recorder(), chat_template=template)


def plain_lm():
    return ToyLM(VOCAB, "$", Recorder())


USER = [{"role": "user", "content": "ab"}]
FEW_SHOT = [
    {"role": "system", "content": "b b"},
    {"role": "user", "content": "a"},
    {"role": "assistant", "content": "b"},
    {"role": "user", "content": "ab"},
]


def run(prompt, lm, **kw):
    return smc.generate(prompt, Regex("[ab ]{0,4}"), lm=lm, particles=4, max_tokens=4, seed=0,
                        progress=False, **kw)


def test_the_rule_on_a_toy_lm_with_a_template():
    lm = chat_lm()
    user_ids = lm.encode(template(USER))
    assert user_ids[:1] == [VOCAB.index("<u>")] and user_ids[-1] == VOCAB.index("<a>")
    assert encode_prompt(lm, "ab") == user_ids                # text: template by default
    assert encode_prompt(lm, "ab", chat=True) == user_ids
    assert encode_prompt(lm, "ab", chat=False) == lm.encode("ab") == [4, 5]  # opt out
    assert encode_prompt(lm, USER) == user_ids                # messages: template
    assert encode_prompt(lm, FEW_SHOT) == lm.encode(template(FEW_SHOT))
    assert encode_prompt(lm, user_ids) == user_ids            # ids: as given
    assert encode_prompt(lm, np.array(user_ids)) == user_ids
    assert encode_prompt(lm, tuple(user_ids)) == user_ids
    assert lm.encode_chat("ab", system="b") == lm.encode(template([{"role": "system", "content": "b"}] + USER))
    # no template: text is plain, as before
    assert encode_prompt(plain_lm(), "ab") == [4, 5]


@pytest.mark.parametrize("conversation", [USER, FEW_SHOT], ids=["user", "few_shot"])
def test_every_form_same_ids_through_every_entry_point(conversation, monkeypatch, tmp_path, capsys):
    want = tuple(chat_lm().encode(template(conversation)))
    forms = {"messages": conversation, "ids": list(want)}
    if conversation is USER:
        forms["text"] = "ab"
    results = {}
    for form, prompt in forms.items():
        rec = Recorder()
        results[form] = run(prompt, chat_lm(rec))
        assert rec.prompt() == want, form                     # generate conditions on want
        assert results[form].stats["prompt_tokens"] == len(want)
        rec = Recorder()
        asyncio.run(smc.agenerate(prompt, lm=chat_lm(rec), particles=2, max_tokens=2, seed=0,
                                  progress=False))
        assert rec.prompt() == want, form
        lm = chat_lm()
        assert LMContext(lm, prompt).prompt_ids == want, form
        assert LMPotential(lm, prompt).prompt == want, form
        assert make_sampler("awrs", lm, None, prompt).prompt_ids == want, form
    # the same conditioning gives the same run (same seed), whichever form it came in
    texts = {form: [(s.text, s.log_weight) for s in r.samples] for form, r in results.items()}
    assert all(t == texts["ids"] for t in texts.values())

    # the CLI: --prompt TEXT, or --messages FILE.json, or --system TEXT --messages FILE.json
    path = tmp_path / "m.json"
    if conversation is USER:
        argvs = [["--prompt", "ab"]]
        path.write_text(json.dumps(USER))
        argvs.append(["--messages", str(path)])
    else:
        path.write_text(json.dumps(conversation[1:]))
        argvs = [["--system", conversation[0]["content"], "--messages", str(path)]]
        full = tmp_path / "full.json"
        full.write_text(json.dumps(conversation))
        argvs.append(["--messages", str(full)])
    for argv in argvs:
        rec = Recorder()
        monkeypatch.setattr("smc.api.cli.load_lm", lambda *a, _rec=rec, **k: chat_lm(_rec))
        code = cli.main(["generate", *argv, "--regex", "[ab ]{0,4}", "--particles", "4",
                         "--max-tokens", "4", "--json", "--quiet"])
        out = json.loads(capsys.readouterr().out)
        assert code == 0 and rec.prompt() == want, argv
        assert [s["text"] for s in out["samples"]] == [s.text for s in results["ids"].samples]


def test_system_prompt_with_text_on_the_cli(monkeypatch, capsys):
    rec = Recorder()
    monkeypatch.setattr("smc.api.cli.load_lm", lambda *a, **k: chat_lm(rec))
    assert cli.main(["generate", "--system", "b", "--prompt", "ab", "--regex", "a?",
                     "--particles", "2", "--max-tokens", "2", "--quiet"]) == 0
    assert rec.prompt() == tuple(chat_lm().encode("<s>b|<u>ab|<a>"))
    assert "log_ml" in capsys.readouterr().out


class Chatty(Model):
    """Unconstrained sampling from the LM after ``prompt`` for at most 3 tokens."""

    def __init__(self, lm, prompt, **kw):
        super().__init__()
        self.context = LMContext(lm, prompt, **kw)

    async def step(self):
        await self.sample(self.context.next_token())
        if self.context.done or len(self.context.tokens) >= 3:
            self.finish()


def test_model_with_system_prompt_and_few_shot_turns():
    want = tuple(chat_lm().encode(template(FEW_SHOT)))
    runs = []
    for prompt in (FEW_SHOT, list(want)):
        rec = Recorder()
        runs.append(asyncio.run(smc.smc(Chatty(chat_lm(rec), prompt), 4, seed=0, progress=False)))
        assert rec.prompt() == want
    assert [(s.text, s.log_weight) for s in runs[0].samples] == [(s.text, s.log_weight) for s in runs[1].samples]
    # generate and the Model condition on the same ids for the same text prompt
    rec_model, rec_gen = Recorder(), Recorder()
    asyncio.run(smc.smc(Chatty(chat_lm(rec_model), "ab"), 2, seed=0, progress=False))
    run("ab", chat_lm(rec_gen))
    assert rec_model.prompt() == rec_gen.prompt() == tuple(chat_lm().encode(template(USER)))


def test_lmcontext_default_follows_the_template_and_chat_false_opts_out():
    lm = chat_lm()
    assert LMContext(lm, "ab").prompt_ids == tuple(lm.encode("<u>ab|<a>"))
    assert LMContext(lm, "ab", chat=False).prompt_ids == (4, 5)
    assert LMContext(plain_lm(), "ab").prompt_ids == (4, 5)    # no template: as before
    assert LMPotential(lm, "ab", chat=False).prompt == (4, 5)
    assert LMContext(plain_lm(), ()).prompt_ids == ()           # a toy LM's empty context


def test_context_length_check_covers_every_form():
    lm = chat_lm()
    lm.max_context = 8
    long_ids = lm.encode(template(FEW_SHOT))
    assert len(long_ids) > 8
    for prompt in (FEW_SHOT, long_ids, "ab ab ab ab"):
        with pytest.raises(ValueError, match="longer than the model's context of 8 tokens"):
            run(prompt, lm)
        with pytest.raises(ValueError, match="longer than the model's context"):
            LMContext(lm, prompt)
        with pytest.raises(ValueError, match="longer than the model's context"):
            LMPotential(lm, prompt)
    for prompt in (USER, lm.encode(template(USER)), "ab"):     # 5 tokens + 4 > 8
        with pytest.raises(ValueError, match="lower max_tokens to at most 3"):
            run(prompt, lm)


class NeedsContext(ToyLM):
    """A toy LM that, like a real backend, refuses the empty context."""

    check_ids = AsyncLM.check_ids


BAD = [
    (None, TypeError, "prompt must be a string, got NoneType; a prompt is text, a list of chat messages"),
    (b"ab", TypeError, "decode bytes to str first"),
    ({"role": "user", "content": "ab"}, TypeError, "prompt must be a string, got dict"),
    ("a\ud800", ValueError, "'\\ud800' at position 1 is a lone surrogate"),
    ([{}], ValueError, "prompt[0] has no 'role' and no 'content'"),
    ([{"role": "user"}], ValueError, "prompt[0] has no 'content'"),
    (USER + [{"content": "a"}], ValueError, "prompt[1] has no 'role'"),
    ([{"role": "usr", "content": "a"}], ValueError, "prompt[0] has role 'usr'; a role is one of system"),
    ([{"role": "user", "content": 5}], TypeError, "prompt[0]['content'] must be a string, got int"),
    ([{"role": "user", "content": ["a"]}], TypeError, "prompt[0]['content'] must be a string, got list"),
    ([{"role": "user", "content": "\udcff"}], ValueError, "prompt[0]['content'] is not valid Unicode text"),
    ([{"role": "user", "content": "a", "name": "x"}], ValueError, "keys other than 'role' and 'content': ['name']"),
    (USER + ["ab"], TypeError, "prompt[1] must be a chat message, a dict with 'role' and 'content', got str"),
    (["a", "b"], TypeError, "prompt[0] is a str; token ids must be integers"),
    ([4, USER[0]], TypeError, "prompt[1] is a dict; token ids must be integers"),
    ([4, True], TypeError, "prompt[1] is a bool"),
    ([4, 2.0], TypeError, "prompt[1] is a float"),
    ([4, -1], ValueError, "prompt[1] = -1 is a negative token id"),
    ([4, 99], ValueError, "prompt has token ids outside [0, 8): [99]"),
]


@pytest.mark.parametrize("prompt, exc, msg", BAD, ids=[m[:30] for *_, m in BAD])
def test_bad_prompts_one_clear_error_everywhere(prompt, exc, msg):
    lm = chat_lm()
    for make in (lambda: run(prompt, lm), lambda: LMContext(lm, prompt),
                 lambda: LMPotential(lm, prompt), lambda: make_sampler("direct", lm, None, prompt)):
        with pytest.raises(exc) as info:
            make()
        assert msg in str(info.value)


def test_bad_prompts_fail_before_loading_a_model(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("load_lm called")

    monkeypatch.setattr("smc.api.generation.load_lm", refuse)
    for prompt, exc, msg in BAD[:-1]:  # all but the range check, which needs the vocabulary
        with pytest.raises(exc, match="prompt"):
            smc.generate(prompt, particles=2, progress=False)


@pytest.mark.parametrize("prompt, kw, msg", [
    (USER, {}, "the prompt is a list of chat messages but the LM (ToyLM) has no chat template"),
    ("ab", dict(chat=True), "chat=True but the LM (ToyLM) has no chat template"),
])
def test_template_needed_without_one(prompt, kw, msg):
    lm = plain_lm()
    for make in (lambda: run(prompt, lm, **kw), lambda: LMContext(lm, prompt, **kw),
                 lambda: LMPotential(lm, prompt, **kw)):
        with pytest.raises(ValueError) as info:
            make()
        assert msg in str(info.value)


def test_chat_flag_that_cannot_apply_is_an_error():
    lm = chat_lm()
    with pytest.raises(ValueError, match="chat=False applies to text prompts"):
        LMContext(lm, USER, chat=False)
    with pytest.raises(ValueError, match="chat=True applies to text prompts; token ids are used as given"):
        run([4, 5], lm, chat=True)
    with pytest.raises(TypeError, match="chat must be True, False or None, got 'yes'"):
        LMPotential(lm, "ab", chat="yes")


def test_empty_prompt_list():
    assert encode_prompt(chat_lm(), []) == []                  # a toy LM: the empty context
    lm = NeedsContext(VOCAB, "$", Recorder(), chat_template=template)
    for make in (lambda: run([], lm), lambda: LMContext(lm, [])):
        with pytest.raises(ValueError, match="the prompt is an empty list .no chat messages, no token ids."):
            make()
    with pytest.raises(ValueError, match="system is given but the messages already start with a system turn"):
        lm.encode_chat(FEW_SHOT, system="a")


def test_cli_prompt_flags_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("smc.api.cli.load_lm", lambda *a, **k: chat_lm())
    good = tmp_path / "good.json"
    good.write_text(json.dumps(FEW_SHOT))
    cases = [
        (["--regex", "a"], "the following arguments are required: --prompt (or --messages FILE.json)"),
        (["--prompt", "a", "--messages", str(good), "--regex", "a"], "either --prompt or --messages"),
        (["--system", "a", "--messages", str(good), "--regex", "a"], "already starts with a system message"),
        (["--messages", str(tmp_path / "none.json"), "--regex", "a"], "cannot read messages file"),
    ]
    for name, text, msg in [
        ("bad.json", "[{", "is not valid JSON"),
        ("obj.json", '{"role": "user", "content": "a"}', "--messages must be a list of chat messages"),
        ("empty.json", "[]", "--messages is an empty list of chat messages"),
        ("role.json", '[{"role": "bot", "content": "a"}]', "--messages[0] has role 'bot'"),
    ]:
        (tmp_path / name).write_text(text)
        cases.append((["--messages", str(tmp_path / name), "--regex", "a"], msg))
    for argv, msg in cases:
        assert cli.main(["generate", "--quiet", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and msg in err, (argv, err)


# ------------------------------------------------------------------ the embedded model
@pytest.mark.slow
def test_embedded_model_every_form_same_ids(embedded_lm):
    lm = embedded_lm
    tok = lm.tokenizer
    for conversation in (USER, FEW_SHOT):
        want = tuple(tok.apply_chat_template(conversation, add_generation_prompt=True)["input_ids"])
        forms = [conversation, list(want)] + (["ab"] if conversation is USER else [])
        runs = []
        for prompt in forms:
            assert LMContext(lm, prompt).prompt_ids == want
            assert LMPotential(lm, prompt).prompt == want
            assert make_sampler("awrs", lm, None, prompt).prompt_ids == want
            runs.append(smc.generate(prompt, Regex("[a-z]{1,3}"), lm=lm, particles=2, max_tokens=3,
                                     seed=0, progress=False))
            assert runs[-1].stats["prompt_tokens"] == len(want)
        assert all([s.text for s in r.samples] == [s.text for s in runs[0].samples] for r in runs)
    assert encode_prompt(lm, "ab", chat=False) == tok("ab")["input_ids"]
    # a last assistant message is continued: the reply extends its text
    prefill = FEW_SHOT + [{"role": "assistant", "content": "The"}]
    ids = encode_prompt(lm, prefill)
    assert ids[:len(want)] == list(want) and tok.decode(ids[len(want):]) == "The"


class StrictTokenizer:
    """A stand-in tokenizer whose chat template refuses system turns (as some models' do)."""

    chat_template = "(any text: the tokenizer has a template)"

    def apply_chat_template(self, messages, **kw):
        import jinja2

        if messages[0]["role"] == "system":
            raise jinja2.exceptions.TemplateError("System role not supported")
        return "".join(m["content"] for m in messages)

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) for c in text]}


def test_template_refusal_is_a_value_error():
    from smc.backends.prompts import TokenizerPrompts

    lm = TokenizerPrompts()
    lm.tokenizer = StrictTokenizer()
    assert lm.is_chat and lm.encode_chat(USER) == [ord("a"), ord("b")]
    with pytest.raises(ValueError, match=r"chat template rejects these messages \(roles: system, user, "
                                         r"assistant, user\): System role not supported"):
        lm.encode_chat(FEW_SHOT)


# ------------------------------------------------------------------ tools in the prompt
TOOLS = [{"type": "function", "function": {"name": "add", "description": "add one", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}}}}}]
HISTORY = [{"role": "user", "content": "add one to 1"},
           {"role": "assistant", "content": None, "tool_calls": [
               {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}]},
           {"role": "tool", "tool_call_id": "call_1", "content": "2"}]
#: a template with a tool section, in the style of Hugging Face tool-use templates
TOOL_TEMPLATE = ("{% if tools %}TOOLS {{ tools | tojson }}\n{% endif %}{% for m in messages %}{{ m.role }}: "
                 "{{ m.content }}{% for c in m.tool_calls or [] %}CALL {{ c.function.name }} "
                 "{{ c.function.arguments | tojson }}{% endfor %}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")
PLAIN_TEMPLATE = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant: "


def char_tokenizer(chat_template: str):
    """A real Hugging Face tokenizer (one token per printable character) with ``chat_template``."""
    import string

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(string.printable))
    core = Tokenizer(models.WordLevel({c: i for i, c in enumerate(chars)}, unk_token=" "))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=core)
    tok.chat_template = chat_template
    return tok


def tokenizer_lm(chat_template: str):
    from smc.backends.prompts import TokenizerPrompts

    lm = TokenizerPrompts()
    lm.tokenizer = char_tokenizer(chat_template)
    lm.vocab = [bytes([i]) for i in range(256)]
    return lm


def test_tools_go_through_a_template_that_takes_them():
    lm = tokenizer_lm(TOOL_TEMPLATE)
    assert lm.chat_takes_tools
    # the template gets the messages as they are, a call's arguments as an object
    as_objects = [HISTORY[0], {**HISTORY[1], "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}]}, HISTORY[2]]
    text = lm.tokenizer.apply_chat_template(as_objects, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert text.startswith("TOOLS [{") and 'CALL add {"a": 1}' in text and "tool: 2" in text
    want = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert encode_prompt(lm, HISTORY, tools=TOOLS) == want


def test_tools_go_into_the_system_message_of_a_template_without_them():
    from smc.backends.prompts import plain_messages, tools_prompt

    lm = tokenizer_lm(PLAIN_TEMPLATE)
    assert not lm.chat_takes_tools
    plain = plain_messages(check_messages(HISTORY), TOOLS)
    assert plain == [{"role": "system", "content": tools_prompt(TOOLS)}, HISTORY[0],
                     {"role": "assistant", "content": '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'},
                     {"role": "user", "content": "<tool_response>\n2\n</tool_response>"}]
    assert encode_prompt(lm, HISTORY, tools=TOOLS) == lm.encode_chat(plain)
    assert encode_prompt(lm, "hi", tools=TOOLS) == lm.encode_chat(
        [{"role": "system", "content": tools_prompt(TOOLS)}, {"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="no tool section"):
        lm.encode_chat(HISTORY, tools=TOOLS)


def test_tools_need_a_prompt_through_the_template():
    lm = chat_lm()
    for prompt, chat in (([1, 2], None), ("hi", False)):
        with pytest.raises(ValueError, match="tools are stated through the chat template"):
            encode_prompt(lm, prompt, chat, tools=TOOLS)
    with pytest.raises(ValueError, match=r"tools\[0\].type must be 'function'"):
        encode_prompt(lm, "hi", tools=[{"type": "retrieval"}])
    with pytest.raises(ValueError, match="tools are stated through the chat template"):
        smc.Request([1, 2], tools=TOOLS)
    assert smc.Request("hi", tools=TOOLS).to_json()["tools"] == TOOLS
