"""benchmarks/peers/genlm_control.py in the project's environment: what it can do without
genlm-control installed (its recipe, its command line, the posterior it reads off a run)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "peers" / "genlm_control.py"
sys.path.insert(0, str(SCRIPT.parent))

import genlm_control as peer  # noqa: E402


class Tok(bytes):
    """A token as genlm-control's contexts hold it: its bytes and its id."""

    def __new__(cls, token_id: int, text: bytes):
        obj = super().__new__(cls, text)
        obj.token_id = token_id
        return obj


EOS = object()


def test_recipe_pins_the_release_and_leaves_torch_to_the_caller():
    assert peer.REQUIREMENTS == ["genlm-control==0.4.1"]
    assert not any(r.startswith("torch") for r in peer.REQUIREMENTS)


def test_command_line_starts_without_genlm_control():
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    assert "--mode" in out.stdout and "patterns" in out.stdout and "exact" in out.stdout


def test_posterior_counts_finished_decodable_particles_only():
    a, b, bad = Tok(1, b"ab"), Tok(2, b"c"), Tok(3, b"\xff")
    contexts = [
        [a, b, EOS],         # "abc", weight e^-1
        [Tok(9, b"abc"), EOS],  # "abc" again, another tokenization, weight e^-2
        [b, EOS],            # "c", weight e^-1
        [a, b],              # unfinished: left out
        [bad, EOS],          # not UTF-8: left out, as decoded_posterior does
        [a, EOS],            # "ab" with weight 0: left out
    ]
    logw = [-1.0, -2.0, -1.0, 5.0, 5.0, -math.inf]
    post, ids = peer.finished_posterior(contexts, logw, lambda t: t is EOS)
    total = 2 * math.exp(-1) + math.exp(-2)
    assert list(post) == ["abc", "c"]  # largest first
    assert post["abc"] == pytest.approx((math.exp(-1) + math.exp(-2)) / total)
    assert post["c"] == pytest.approx(math.exp(-1) / total)
    assert ids == {"abc": [1, 2], "c": [2]}  # the first particle's tokens, no EOS


def test_posterior_survives_weights_that_underflow():
    # exp(-2000) is 0.0 in floats; normalising in log space keeps the ratio e^1 : 1
    post, _ = peer.finished_posterior([[Tok(1, b"x"), EOS], [Tok(2, b"y"), EOS]],
                                      [-2000.0, -2001.0], lambda t: t is EOS)
    assert post["x"] == pytest.approx(math.e / (1 + math.e))


def test_no_finished_particle_gives_an_empty_posterior():
    assert peer.finished_posterior([[Tok(1, b"x")]], [0.0], lambda t: t is EOS) == ({}, {})
    assert peer.finished_posterior([[Tok(1, b"x"), EOS]], [-math.inf],
                                   lambda t: t is EOS) == ({}, {})


def test_tokenizations_enumerate_every_spelling_up_to_the_bound():
    vocab = {1: b"a", 2: b"b", 3: b"ab", 4: b"abc", 5: b"c", 6: b"x"}
    assert sorted(peer.tokenizations(vocab, b"abc", 3)) == [(1, 2, 5), (3, 5), (4,)]
    assert sorted(peer.tokenizations(vocab, b"abc", 2)) == [(3, 5), (4,)]  # (1, 2, 5) is too long
    assert peer.tokenizations(vocab, b"abd", 3) == []


def test_mean_and_se():
    mean, se = peer.mean_and_se([1.0, 2.0, 3.0, 6.0])
    assert mean == 3.0
    assert se == pytest.approx(math.sqrt((4 + 1 + 0 + 9) / 3 / 4))
    assert peer.mean_and_se([5.0]) == (5.0, 0.0)


def test_int_list_reads_commas_and_inclusive_ranges():
    assert peer.int_list("0") == [0]
    assert peer.int_list("0,3,5-7") == [0, 3, 5, 6, 7]
    assert peer.int_list("0-999")[-1] == 999 and len(peer.int_list("0-999")) == 1000
