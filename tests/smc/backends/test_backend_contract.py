"""The one LM backend contract: ``LMBackend`` and ``LM_MEMBERS`` agree, ``is_lm`` /
``check_backend`` accept ToyLM, the HF backend, the MLX backend and the vLLM backend (over the
fake engine of test_counters) and reject an object missing any member with an error naming it;
every ``lm`` parameter is annotated with the Protocol; one EOS helper serves HF and vLLM."""

import ast
import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest

import smc
from smc.backends.base import COUNTERS, LM_MEMBERS, LMBackend, check_backend, is_lm, missing_members
from smc.backends.vocab import eos_ids
from tests.smc.backends.test_counters import fake_vllm  # noqa: F401  (a fixture: the vLLM backend, fake engine)

ROOT = Path(__file__).resolve().parents[3]


def toy() -> smc.ToyLM:
    return smc.ToyLM(["a", "b", "<eos>"], "<eos>", lambda ids: [0.4, 0.4, 0.2])


class Complete:
    """Every member of the contract, nothing else (a user's own backend)."""

    vocab = [b"a", b"<eos>"]
    eos_token_ids = [1]

    def encode(self, text):
        return [0] * len(text)

    async def next_token_logprobs(self, ids):
        raise NotImplementedError

    async def batch_next_token_logprobs(self, batch):
        raise NotImplementedError


def without(member: str) -> object:
    """A ``Complete`` backend with ``member`` hidden."""
    cls = type("Without_" + member, (Complete,), {})

    def getattribute(self, name, _hidden=member):
        if name == _hidden:
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    cls.__getattribute__ = getattribute
    return cls()


def protocol_members() -> set[str]:
    """The members the Protocol class declares: its annotations and the methods of its body."""
    methods = {n for n, v in vars(LMBackend).items() if callable(v) and not n.startswith("_")}
    return set(LMBackend.__annotations__) | methods


def test_lm_members_are_the_protocols():
    assert set(LM_MEMBERS) == protocol_members()
    assert len(LM_MEMBERS) == len(set(LM_MEMBERS))


def test_a_user_backend_with_the_members_is_one():
    lm = Complete()
    assert is_lm(lm) and isinstance(lm, LMBackend) and missing_members(lm) == []
    check_backend(lm)


@pytest.mark.parametrize("member", LM_MEMBERS)
def test_missing_member_is_rejected_by_name(member):
    lm = without(member)
    assert not hasattr(lm, member)
    assert not is_lm(lm)
    assert not isinstance(lm, LMBackend)
    assert missing_members(lm) == [member]
    with pytest.raises(TypeError, match=f"Without_{member} has no {member}$"):
        check_backend(lm)
    with pytest.raises(TypeError, match=f"has no {member}$"):
        smc.generate("a", lm=lm, particles=2, max_tokens=2)


def test_samplers_and_contexts_reject_a_non_backend():
    from samplers import make_sampler
    from smc.programs.context import LMContext

    partial = SimpleNamespace(vocab=[b"a"], eos_token_ids=[0])
    with pytest.raises(TypeError, match="has no encode, next_token_logprobs, batch_next_token_logprobs"):
        make_sampler("direct", partial)
    with pytest.raises(TypeError, match="lm must be a language-model backend"):
        LMContext(partial)


def test_toy_lm_is_a_backend():
    lm = toy()
    assert is_lm(lm) and isinstance(lm, LMBackend) and missing_members(lm) == []


def test_fake_vllm_backend_is_a_backend(fake_vllm):  # noqa: F811
    lm, _ = fake_vllm
    assert is_lm(lm) and isinstance(lm, LMBackend) and missing_members(lm) == []
    assert lm.eos_token_ids == [2]  # the fake tokenizer's, through eos_ids (no generation config)


@pytest.mark.slow
def test_hf_backend_is_a_backend(embedded_lm):
    assert is_lm(embedded_lm) and isinstance(embedded_lm, LMBackend)
    assert missing_members(embedded_lm) == []


@pytest.mark.slow
def test_mlx_backend_is_a_backend(embedded_mlx_lm):
    """(skips where MLX does not import; tests/smc/backends/test_mlx_backend.py checks the rest)"""
    assert is_lm(embedded_mlx_lm) and isinstance(embedded_mlx_lm, LMBackend)
    assert missing_members(embedded_mlx_lm) == []
    assert set(COUNTERS) <= set(embedded_mlx_lm.stats)


def _lm_parameters():
    """(file:line, function, parameter, annotation) of every parameter named lm or proposal_lm
    in the library's packages."""
    for package in ("smc", "potentials", "samplers"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    args = node.args
                    for a in args.posonlyargs + args.args + args.kwonlyargs:
                        if a.arg in ("lm", "proposal_lm"):
                            note = ast.unparse(a.annotation) if a.annotation else None
                            yield f"{path.relative_to(ROOT)}:{node.lineno}", node.name, a.arg, note


def test_every_lm_parameter_is_annotated_with_the_protocol():
    params = list(_lm_parameters())
    assert len(params) >= 25  # the scan finds them (26 when the Protocol became the annotation)
    wrong = [p for p in params if p[3] not in ("LMBackend", "LMBackend | None")]
    assert not wrong, wrong


def test_runtime_annotations_resolve_to_the_protocol():
    """Where the Protocol is imported at run time, the annotations resolve to it."""
    import typing

    import samplers
    from samplers.awrs import AWRSSampler
    from samplers.base import TokenSampler
    from smc.api import generation

    for fn in (generation.agenerate, generation.prompt_ids_for, samplers.make_sampler,
               TokenSampler.__init__, AWRSSampler.__init__):
        # Only ``lm``'s annotation: others may name types imported for type checkers only.
        hint = eval(fn.__annotations__["lm"], fn.__globals__)
        assert hint is LMBackend or LMBackend in typing.get_args(hint), (fn, hint)


# ------------------------------------------------------------------ EOS discovery
class Tok:
    def __init__(self, eos_token_id):
        self.eos_token_id = eos_token_id


def test_eos_ids_generation_config_first_then_tokenizer():
    assert eos_ids(Tok(2), 10) == [2]
    assert eos_ids(Tok(2), 10, 5) == [5, 2]
    assert eos_ids(Tok(2), 10, [7, 2, 7]) == [7, 2]  # duplicates dropped, order kept
    assert eos_ids(Tok([3, 4]), 10) == [3, 4]  # a tokenizer may name several
    assert eos_ids(Tok(None), 10, [9, 12]) == [9]  # 12 is past the vocabulary: never drawn
    assert eos_ids(SimpleNamespace(), 10, 1) == [1]  # a tokenizer without eos_token_id


def test_eos_ids_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"'m' names no EOS token id below its vocabulary size 4"):
        eos_ids(Tok(None), 4, None, "'m'")
    with pytest.raises(ValueError, match="generation config: 9, tokenizer: 5"):
        eos_ids(Tok(5), 4, 9)
    with pytest.raises(TypeError, match="eos_token_id must be an integer id or a list of them, got '2'"):
        eos_ids(Tok("2"), 4)
    with pytest.raises(TypeError, match="got True"):
        eos_ids(Tok(None), 4, [True])


@pytest.mark.slow
def test_eos_ids_of_the_embedded_tokenizer():
    from transformers import AutoTokenizer

    from smc.backends.vllm import _generation_eos
    from smc.backends.loading import embedded_model_dir

    path = embedded_model_dir()
    tok = AutoTokenizer.from_pretrained(path)
    gen = _generation_eos(str(path))
    assert gen == 2 and tok.eos_token_id == 2
    assert eos_ids(tok, len(tok), gen) == [2]
    assert tok.convert_ids_to_tokens(2) == "<|im_end|>"
    assert _generation_eos(str(path / "no-such-dir")) is None


def test_module_docstring_lists_the_members():
    """The contract's prose (module docstring) names every required member."""
    import smc.backends.base as base

    doc = inspect.getdoc(base)
    required = doc[doc.index("A backend is"):doc.index("Optional members")]
    for name in LM_MEMBERS:
        assert name in required, name


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end, text.index(start))]


def test_design_doc_and_docstring_state_the_same_members():
    """docs/design.md's two tables (required, optional) name the members the module docstring
    names, and the required ones are LM_MEMBERS."""
    import re

    import smc.backends.base as base

    doc = inspect.getdoc(base)
    required_doc = re.findall(r"^    (?:async )?(\w+)[:(]", _section(doc, "A backend is", "Optional"), re.M)
    optional_doc = re.findall(r"^    (?:async )?(\w+)[:(]", _section(doc, "Optional", "``is_lm``"), re.M)
    section = _section((ROOT / "docs/design.md").read_text(encoding="utf-8"), "## LM backends", "`smc.load_lm()`")
    tables = [[line for line in block.splitlines() if line.startswith("| `")]
              for block in section.split("\n\n") if block.lstrip().startswith("| member")]
    assert len(tables) == 2
    required_md, optional_md = (
        [name for row in rows for name in re.findall(r"`(?:async )?(\w+)", row.split(" | ")[0])]
        for rows in tables
    )
    assert required_doc == required_md == list(LM_MEMBERS)
    assert optional_doc == optional_md
    assert {"stats", "special_token_ids", "max_context", "batch_next_token_dists", "is_chat",
            "encode_chat", "chat_takes_tools", "clear_cache", "close"} == set(optional_md)
