"""smc.engine.viz: the genealogy data, the matplotlib summary, and the HTML page in a real browser."""

import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest

import smc.engine.viz as viz
from smc.core.logmath import NEG_INF
from smc import agenerate
from smc.backends.toy import ToyLM
from smc.engine.result import Result
from tests.toy_problems import TokenPredicate

EVIL = "<b>x</b></script><script>document.title='pwned'</script>"
VOCAB = ["a", "b", EVIL, "$"]
LM = ToyLM(VOCAB, "$", lambda ids: [0.45, 0.3, 0.1, 0.15])
# at most two "a"s, and not empty
PHI = TokenPredicate(4, [3], lambda x: x.count(0) <= 2, lambda x: len(x) >= 1)


async def run(n=8, max_tokens=6, seed=1, phi=PHI, ess_threshold=0.9, finish_share=0.0):
    return await agenerate("", phi, lm=LM, particles=n, max_tokens=max_tokens, seed=seed,
                           sampler="direct", ess_threshold=ess_threshold, progress=False,
                           finish_share=finish_share)


# ---------------------------------------------------------------- genealogy data
async def test_genealogy_replays_every_final_particle():
    r = await run()
    assert r.stats["resampling_events"] >= 1  # the run exercises the ancestor bookkeeping
    g = viz.genealogy(r, LM)
    cols = g["columns"]
    assert len(cols) == len(r.history) + 1 and g["decoded"]
    final = cols[-1]["nodes"]
    assert [tuple(nd["tokens"]) for nd in final] == [s.token_ids for s in r.samples]
    assert [nd["text"] for nd in final] == [s.text for s in r.samples]
    # every node's prefix is its parent's prefix plus the tokens it added
    prefix = {(0, i): nd["tokens"] for i, nd in enumerate(cols[0]["nodes"])}
    for c in range(1, len(cols) - 1):
        for i, nd in enumerate(cols[c]["nodes"]):
            prefix[c, i] = prefix[c - 1, nd["parent"]] + nd["tokens"]
            want = b"".join(LM.vocab[t] for t in prefix[c, i]).decode()
            assert nd["text"] == want
    last = len(cols) - 1
    for i, nd in enumerate(final):
        assert prefix[last - 1, nd["parent"]] == nd["tokens"]
    for col, rec in zip(cols, r.history):
        assert col["resampled"] == (rec.ancestors is not None) and col["ess"] == rec.ess
        assert math.isclose(sum(nd["weight"] for nd in col["nodes"]), 1.0)
    assert [nd["weight"] for nd in final] == pytest.approx(r.weights.tolist())


async def test_genealogy_and_plot_of_a_run_that_banked():
    """The banked copies are samples with no place in the lineage: the final column is the
    population, N stays N, and the page and the plot still draw."""
    import matplotlib.pyplot as plt

    r = await run(finish_share=0.5)
    banked = r.stats["banked"]
    assert banked > 0 and len(r.samples) == 8 + banked
    g = viz.genealogy(r, LM)
    assert g["particles"] == 8 and g["banked"] == banked
    final = g["columns"][-1]["nodes"]
    assert [nd["text"] for nd in final] == [s.text for s in r.samples[:8]]
    assert [nd["weight"] for nd in final] == pytest.approx(r.weights[:8].tolist())
    assert "<html" in viz.to_html(r, LM).lower()
    axes = viz.plot(r)
    assert axes[1].get_ylim()[1] == pytest.approx(8 * 1.08)
    plt.close("all")


async def test_genealogy_without_lm_shows_ids():
    r = await run(n=4, max_tokens=3)
    g = viz.genealogy(r)
    assert not g["decoded"]
    nd = next(nd for nd in g["columns"][0]["nodes"] if nd["tokens"])
    assert nd["added"] == " ".join(f"[{t}]" for t in nd["tokens"])
    assert [nd["text"] for nd in g["columns"][-1]["nodes"]] == [s.text for s in r.samples]


def test_genealogy_rejects_bad_input():
    with pytest.raises(TypeError, match="Result"):
        viz.genealogy({"samples": []})
    with pytest.raises(TypeError, match="vocab"):
        viz.genealogy(Result(samples=[], log_ml=NEG_INF), lm=object())


# ---------------------------------------------------------------- matplotlib
async def test_plot_draws_weights_ess_and_posterior():
    r = await run()
    axes = r.plot()
    assert len(axes) == 3 and axes[0].figure is axes[2].figure
    a_w, a_ess, a_post = axes
    assert [p.get_height() for p in a_w.patches] == pytest.approx(r.weights.tolist())
    line = a_ess.get_lines()[0]
    assert list(line.get_ydata()) == pytest.approx([rec.ess for rec in r.history])
    events = [rec.step for rec in r.history if rec.ancestors is not None]
    vlines = [ln for ln in a_ess.get_lines() if ln.get_label() == "resampled" or
              (len(ln.get_xdata()) == 2 and ln.get_xdata()[0] == ln.get_xdata()[1])]
    assert sorted(ln.get_xdata()[0] for ln in vlines) == events
    post = list(r.posterior.values())[:10]
    assert sorted(p.get_width() for p in a_post.patches) == pytest.approx(sorted(post))
    matplotlib.pyplot.close("all")


async def test_plot_into_given_axes_and_empty_result():
    import matplotlib.pyplot as plt

    r = await run(n=4, phi=TokenPredicate(4, [3], lambda x: False))
    assert r.finished == []
    fig, axes = plt.subplots(1, 3)
    out = viz.plot(r, ax=axes)
    assert list(out) == list(axes)
    assert any("no finished samples" in t.get_text() for t in axes[2].texts)
    with pytest.raises(ValueError, match="three Axes"):
        viz.plot(r, ax=axes[:2])
    plt.close("all")


# ---------------------------------------------------------------- HTML
async def test_html_is_self_contained_and_escapes_text(tmp_path):
    r = await run()
    assert any(EVIL in s.text for s in r.samples)  # the hostile token made it into a sample
    page = r.to_html(tmp_path / "run.html", lm=LM).read_text(encoding="utf-8")
    assert EVIL not in page and "</script><script>" not in page
    # no external resource: the only URL is the SVG namespace
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) == {"http://www.w3.org/2000/svg"}
    assert not re.search(r"<(link|img|iframe)\b|\bsrc\s*=", page)
    data = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(data)["columns"][-1]["nodes"][0]["text"] == r.samples[0].text


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def chromium():
    exe = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("headless Chromium not found: install it with `apt-get install -y chromium` "
                    "(or set CHROMIUM=/path/to/chromium) to test the HTML page in a browser")
    return exe


def render(path: Path) -> str:
    """The page's DOM after its scripts ran, from headless Chromium."""
    with tempfile.TemporaryDirectory() as profile:
        out = subprocess.run(
            [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", path.as_uri()],
            capture_output=True, text=True, timeout=60,
        )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def js_errors(dom: str) -> list[str]:
    m = re.search(r'<html[^>]*\bdata-js-errors="([^"]*)"', dom)
    return [] if m is None else json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


async def test_html_renders_particles_in_chromium(tmp_path):
    r = await run()
    dom = render(r.to_html(tmp_path / "run.html", lm=LM))
    assert js_errors(dom) == []
    n, cols = len(r.samples), len(r.history) + 1
    assert re.search(r'<html[^>]*\bdata-rendered="(\d+)"', dom).group(1) == str(n * cols)
    assert len(re.findall(r'<g class="node particle ', dom)) == n * cols
    assert len(re.findall(r'<tr class="row-particle"', dom)) == n  # the table of the shown column
    # the hostile text is shown as text, never run: no script element came from it
    assert "&lt;/script&gt;&lt;script&gt;" in dom
    assert len(re.findall(r"<script\b", dom)) == 3 and "pwned" not in re.search(r"<title>(.*?)</title>", dom).group(1)


async def test_html_renders_a_run_where_nothing_finished(tmp_path):
    r = await run(n=4, phi=TokenPredicate(4, [3], lambda x: len(x) < 1 or x[0] != 0, lambda x: False))
    assert r.finished == [] and r.history
    dom = render(viz.save(r, tmp_path / "none.html"))
    assert js_errors(dom) == []
    assert "No particle finished." in dom
    assert len(re.findall(r'<g class="node particle ', dom)) == 4 * (len(r.history) + 1)


async def test_browser_check_detects_script_errors(tmp_path):
    """The error hook the tests rely on does report a failing script."""
    r = await run(n=2, max_tokens=2)
    page = viz.to_html(r, LM).replace('JSON.parse(document.getElementById("data").textContent)',
                                      "JSON.parse('{broken')")
    path = tmp_path / "broken.html"
    path.write_text(page, encoding="utf-8")
    dom = render(path)
    assert js_errors(dom) and not re.search(r"<html[^>]*\bdata-rendered=", dom)
