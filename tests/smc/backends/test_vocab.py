"""Byte vocabularies of real tokenizers: concatenated token bytes give back the text's bytes."""

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from smc.backends.vocab import build_vocab, byte_decoder, token_bytes, tokenizer_scheme

TRICKY = [
    "hello world",
    "Crème brûlée à la façon d'Étienne — naïve café",
    "東京都の天気は晴れです。中文测试",
    "emoji: 🙂🚀👩‍👩‍👧 and ZWJ",
    "tabs\there\t\tand\t",
    "many     spaces   and  trailing  ",
    "lines\n\nwith\r\nbreaks\n",
    "  leading spaces",
    "mixed\t 🙂 \n  Ünïcödé\u00a0nbsp",
    "<|im_start|> looks special but is text",
]


def joined(vocab: list[bytes], ids: list[int]) -> bytes:
    return b"".join(vocab[i] for i in ids)


def test_byte_decoder_is_a_bijection_onto_bytes():
    table = byte_decoder()
    assert len(table) == 256
    assert sorted(table.values()) == list(range(256))
    assert table["Ġ"] == ord(" ") and table["Ċ"] == ord("\n") and table["A"] == ord("A")


def test_token_bytes_schemes():
    assert token_bytes("Ġhello", "byte_level") == b" hello"
    assert token_bytes("âĢĶ", "byte_level") == "—".encode()
    assert token_bytes("▁hello▁", "sentencepiece") == b" hello "
    assert token_bytes("<0x0A>", "sentencepiece") == b"\n"
    assert token_bytes("<0xE2>", "sentencepiece") == b"\xe2"
    assert token_bytes("plain", "text") == b"plain"


@pytest.mark.slow
def test_embedded_tokenizer_round_trips(embedded_lm):
    tok = embedded_lm.tokenizer
    assert tokenizer_scheme(tok) == "byte_level"
    vocab = embedded_lm.vocab
    assert len(vocab) == len(tok)
    for text in TRICKY:
        ids = embedded_lm.encode(text)
        assert joined(vocab, ids) == text.encode(), text


@pytest.mark.slow
def test_embedded_special_tokens(embedded_lm):
    tok = embedded_lm.tokenizer
    eos = tok.eos_token_id
    assert embedded_lm.eos_token_ids == [eos]
    assert embedded_lm.vocab[eos] == tok.eos_token.encode()
    assert eos not in embedded_lm.special_token_ids
    for i, added in tok.added_tokens_decoder.items():
        assert embedded_lm.vocab[i] == added.content.encode()
        if added.special and i != eos:
            assert i in embedded_lm.special_token_ids
    # Ordinary text tokens are not special.
    assert not set(embedded_lm.encode("hello world")) & embedded_lm.special_token_ids


def sentencepiece_style_tokenizer(prepend_scheme: str) -> PreTrainedTokenizerFast:
    """A tiny Llama-2-like tokenizer: BPE over pieces with ▁ for space and byte fallback."""
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    # Ordinary pieces; "a", "▁" and "é" duplicate byte-fallback spellings on purpose.
    pieces += ["▁", "a", "b", "c", "e", "h", "l", "o", "w", "r", "d", "é", "▁h", "he", "ll", "llo",
               "▁he", "▁hello", "▁w", "or", "▁wor", "ld", "▁world"]
    vocab = {p: i for i, p in enumerate(pieces)}
    merges = [("▁", "h"), ("h", "e"), ("l", "l"), ("ll", "o"), ("▁h", "e"), ("▁he", "llo"),
              ("▁", "w"), ("o", "r"), ("▁w", "or"), ("l", "d"), ("▁wor", "ld")]
    tk = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend_scheme)
    tk.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
         decoders.Strip(" ", 1 if prepend_scheme != "never" else 0, 0)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


@pytest.mark.parametrize("prepend_scheme", ["never", "first"])
def test_sentencepiece_style_round_trips(prepend_scheme):
    tok = sentencepiece_style_tokenizer(prepend_scheme)
    assert tokenizer_scheme(tok) == "sentencepiece"
    vocab, special = build_vocab(tok)
    assert vocab[3 + 0x41] == b"A" and vocab[3 + 0xE9] == b"\xe9"
    assert {tok.convert_tokens_to_ids(t) for t in ["<unk>", "<s>", "</s>"]} <= special
    # Duplicate byte strings are kept: a piece and its byte-fallback spelling.
    assert vocab.count(b"a") == 2 and vocab.count(b" ") == 2
    for text in TRICKY + ["hello world", "hello  world"]:
        ids = tok.encode(text, add_special_tokens=False)
        assert not set(ids) & special, text  # byte fallback, never <unk>
        # A dummy-prefix tokenizer gives the first piece the space the model sees (Metaspace
        # adds none when the text already starts with a space).
        dummy = prepend_scheme == "first" and not text.startswith(" ")
        expected = b" " * dummy + text.encode()
        assert joined(vocab, ids) == expected, text
    if prepend_scheme == "first":
        # Merged pieces are used, not only single characters and bytes.
        ids = tok.encode("hello world", add_special_tokens=False)
        assert tok.convert_ids_to_tokens(ids) == ["▁hello", "▁world"]
        assert [vocab[i] for i in ids] == [b" hello", b" world"]


def test_byte_level_tokenizer_built_in_process():
    """A GPT-2-style byte-level BPE with an added special token, independent of the model."""
    alphabet = list(byte_decoder())
    vocab = {c: i for i, c in enumerate(alphabet)}
    vocab["Ġh"] = len(vocab)
    tk = Tokenizer(models.BPE(vocab, [("Ġ", "h")]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|end|>")
    vocab_bytes, special = build_vocab(tok)
    end = tok.convert_tokens_to_ids("<|end|>")
    assert vocab_bytes[end] == b"<|end|>" and end in special
    for text in TRICKY:
        assert joined(vocab_bytes, tok.encode(text)) == text.encode(), text
