"""Pictures of an SMC run: a matplotlib summary and a self-contained HTML genealogy page.

With log weights lw_i^t of particle i after step t, the pictures show the normalized weights
wbar_i^t = exp(lw_i^t) / sum_j exp(lw_j^t), the effective sample size
ESS^t = 1 / sum_i (wbar_i^t)^2 (as recorded before any resampling), the resampling events, and
the genealogy: particle k of step t+1 descends from particle a_k of step t, where a = the step's
``ancestors`` when the population was resampled after step t, else the identity.

    import smc.engine.viz
    smc.engine.viz.plot(result)                          # final weights, ESS trace, posterior
    smc.engine.viz.save(result, "run.html", lm=lm)       # open run.html in any browser, offline

The HTML page embeds its data as JSON and draws the genealogy with inline JavaScript into SVG;
it loads nothing from the network. Generated text is only ever inserted as text nodes (never as
markup), so a sample containing ``<script>`` shows up as those characters.
"""

from __future__ import annotations

import functools
import html as _html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from smc.backends.vocab import decode
from smc.core.logmath import NEG_INF, json_number, normalized

if TYPE_CHECKING:  # annotations only: importing it loads torch
    from smc.backends.base import LMBackend
    from smc.engine.result import Result

__all__ = ["genealogy", "plot", "to_html", "save"]


# ---------------------------------------------------------------------------- data
def _decoder(lm: LMBackend | None) -> Callable[[Sequence[int]], str] | None:
    if lm is None:
        return None
    if getattr(lm, "vocab", None) is None:
        raise TypeError(f"lm must have a .vocab (list of token byte strings), got {type(lm).__name__}")

    return functools.partial(decode, lm)


def _check_result(result: Any) -> None:
    """TypeError unless ``result`` is an SMC Result (read by its members: this module sits below
    smc.engine.result, whose methods draw through it)."""
    if not all(hasattr(result, k) for k in ("samples", "history", "log_ml", "weights")):
        raise TypeError(f"expected an smc Result, got {type(result).__name__}")


def _population(result: Result) -> int:
    """N: the samples that are the final population (those a run banked follow them)."""
    return len(result.samples) - result.stats.get("banked", 0)


def genealogy(result: Result, lm: LMBackend | None = None) -> dict[str, Any]:
    """The run as columns of nodes: one column per step, then one for the final samples.

    Node (t, i) is particle i after step t: the tokens it added at step t, its prefix (all its
    tokens so far, replayed along its lineage), log weight, normalized weight, finished flag, and
    ``parent``, its particle index in column t-1. ``resampled`` marks steps after which the
    population was resampled. With ``lm`` (anything with ``vocab``, a list of token byte strings)
    tokens are decoded to text; without it they are shown as ids, and only the final column has
    text (the samples' own). The final column's weights are Result.weights (unfinished count 0).
    """
    _check_result(result)
    decode = _decoder(lm)

    def show(ids: Sequence[int]) -> str:
        if decode is not None:
            return decode(ids)
        return " ".join(f"[{t}]" for t in ids)

    n = _population(result)
    columns: list[dict[str, Any]] = []
    prefixes: list[tuple[int, ...]] = [()] * n
    carried = list(range(n))  # particle i of the coming step descends from particle carried[i]
    for rec in result.history:
        if len(rec.tokens) != n or len(rec.log_weights) != n or len(rec.finished) != n:
            raise ValueError(f"step {rec.step} records {len(rec.tokens)} particles, the Result has {n}")
        prefixes = [prefixes[a] + tuple(t) for a, t in zip(carried, rec.tokens)]
        wbar = normalized(rec.log_weights)[0].tolist()
        nodes = [
            {
                "parent": carried[i],
                "tokens": [int(t) for t in rec.tokens[i]],
                "added": show(rec.tokens[i]),
                "text": show(prefixes[i]),
                "log_weight": json_number(rec.log_weights[i]),
                "weight": wbar[i],
                "finished": bool(rec.finished[i]),
                "dead": rec.log_weights[i] == NEG_INF,
            }
            for i in range(n)
        ]
        columns.append(
            {"label": f"step {rec.step}", "step": rec.step, "ess": float(rec.ess),
             "resampled": rec.ancestors is not None, "nodes": nodes}
        )
        carried = list(range(n)) if rec.ancestors is None else [int(a) for a in rec.ancestors]
    final_w = result.weights.tolist()
    columns.append(
        {
            "label": "samples",
            "step": None,
            "ess": float(result.ess),
            "resampled": False,
            "nodes": [
                {
                    "parent": carried[i] if result.history else None,
                    "tokens": [int(t) for t in s.token_ids],
                    "added": "",
                    "text": s.text,
                    "log_weight": json_number(s.log_weight),
                    "weight": final_w[i],
                    "finished": bool(s.finished),
                    "dead": s.log_weight == NEG_INF,
                }
                for i, s in enumerate(result.samples[:n])
            ],
        }
    )
    return {
        "particles": n,
        "banked": len(result.samples) - n,  # finished copies set aside (Model.bank): no node
        "log_ml": json_number(result.log_ml),
        "decoded": decode is not None,
        "posterior": [[t, p] for t, p in result.posterior.items()],
        "columns": columns,
    }


# ---------------------------------------------------------------------------- matplotlib
def _label(text: str, width: int = 28) -> str:
    r = repr(text)
    return r if len(r) <= width else r[: width - 1] + "…"


def plot(result: Result, ax: Any = None, *, top_k: int = 10) -> Any:
    """Three panels: final normalized weights per particle, ESS over steps with resampling
    events, and the posterior over the ``top_k`` most probable distinct finished texts.

    Args:
        result: an SMC Result.
        ax: None (a new 1x3 figure) or a sequence of three matplotlib Axes to draw into.
        top_k: how many distinct texts the posterior panel shows.

    Returns the three Axes (a numpy array); ``axes[0].figure`` is the figure.
    """
    import matplotlib.pyplot as plt

    _check_result(result)
    if ax is None:
        _, axes = plt.subplots(1, 3, figsize=(15, 3.8), gridspec_kw={"width_ratios": [1, 1.3, 1.4]})
    else:
        axes = np.asarray(ax, dtype=object).ravel()
        if len(axes) != 3:
            raise ValueError(f"ax must be None or three Axes (weights, ESS, posterior), got {len(axes)}")
    a_w, a_ess, a_post = axes
    n = len(result.samples)
    pop = _population(result)

    w = result.weights
    colors = ["tab:blue" if s.finished else "lightgray" for s in result.samples]
    a_w.bar(np.arange(n), w, color=colors, width=0.9)
    a_w.set_xlabel("particle")
    a_w.set_ylabel("normalized weight")
    a_w.set_title(f"final weights ({len(result.finished)}/{n} finished)")
    a_w.set_ylim(0, max(1e-9, float(w.max()) if n else 1.0) * 1.1)

    steps = [r.step for r in result.history]
    ess = [r.ess for r in result.history]
    if steps:
        a_ess.plot(steps, ess, "-o", ms=3, color="tab:blue", label="ESS")
        events = [r for r in result.history if r.ancestors is not None]
        for k, r in enumerate(events):
            a_ess.axvline(r.step, color="tab:red", alpha=0.35, lw=1, label="resampled" if k == 0 else None)
        if events:
            a_ess.plot([r.step for r in events], [r.ess for r in events], "v", color="tab:red", ms=6)
    a_ess.axhline(pop, color="gray", ls="--", lw=1, label=f"N = {pop}")
    a_ess.set_ylim(0, pop * 1.08)
    a_ess.set_xlabel("step")
    a_ess.set_ylabel("ESS (before resampling)")
    a_ess.set_title(f"ESS trace ({sum(r.ancestors is not None for r in result.history)} resampling events)")
    a_ess.legend(loc="lower left", fontsize=8)

    post = list(result.posterior.items())[:top_k]
    if post:
        labels = [_label(t) for t, _ in post][::-1]
        a_post.barh(np.arange(len(post)), [p for _, p in post][::-1], color="tab:green")
        a_post.set_yticks(np.arange(len(post)), labels, fontsize=8)
        a_post.set_xlim(0, 1)
    else:
        a_post.text(0.5, 0.5, "no finished samples", ha="center", va="center", transform=a_post.transAxes)
        a_post.set_yticks([])
    a_post.set_xlabel("posterior probability")
    lm_text = f"{result.log_ml:.3g}" if result.log_ml > NEG_INF else "-inf"
    a_post.set_title(f"posterior (top {len(post)}), log Ẑ = {lm_text}")
    axes[0].figure.tight_layout()
    return axes


# ---------------------------------------------------------------------------- HTML
def _json_for_script(data: Any) -> str:
    """JSON safe inside <script>: no '<', '>', '&' or line separators can end or confuse it."""
    s = json.dumps(data, ensure_ascii=False, allow_nan=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                    ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        s = s.replace(ch, esc)
    return s


def to_html(result: Result, lm: LMBackend | None = None, *, title: str = "SMC run") -> str:
    """One self-contained HTML page (inline CSS, JS and SVG) showing the run's genealogy.

    Columns are steps, rows particles; lines join each particle to its parent, node area grows
    with the normalized weight (dead particles are crosses, finished ones ringed). A slider picks
    a step whose particles (parent, tokens added, text so far, weight) are listed in a table; an
    ESS trace marks resampling events; hovering a node shows its details and clicking it
    highlights its lineage. Pass ``lm`` to decode tokens to text (see ``genealogy``).
    """
    data = genealogy(result, lm)
    data["title"] = str(title)
    return (
        _TEMPLATE.replace("__TITLE__", _html.escape(str(title)))
        .replace("__DATA__", _json_for_script(data))
    )


def save(result: Result, path: str | Path, lm: LMBackend | None = None, *, title: str = "SMC run") -> Path:
    """Write ``to_html(result, lm)`` to ``path`` (UTF-8) and return the path."""
    path = Path(path)
    path.write_text(to_html(result, lm, title=title), encoding="utf-8")
    return path


_TEMPLATE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'">
<title>__TITLE__</title>
<script>
window.__errors = [];
window.addEventListener("error", function (e) {
  window.__errors.push(String(e.message || e));
  document.documentElement.setAttribute("data-js-errors", JSON.stringify(window.__errors));
});
</script>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 18px; margin: 0 0 4px; }
#summary { color: #555; margin-bottom: 8px; }
#controls { margin: 8px 0; display: flex; gap: 12px; align-items: center; }
#controls input[type=range] { width: 360px; }
#tree-wrap { overflow: auto; max-height: 60vh; border: 1px solid #ddd; }
.link { stroke: #999; stroke-width: 1; fill: none; }
.link.resampled { stroke: #d62728; stroke-opacity: .55; }
.link.lineage, .node.lineage circle { stroke: #ff7f0e; stroke-width: 2.5; stroke-opacity: 1; }
.node circle { fill: #1f77b4; stroke: #1f77b4; }
.node.finished circle { stroke: #2ca02c; stroke-width: 2; }
.node.dead path { stroke: #888; stroke-width: 1.5; }
.col-label { font-size: 11px; fill: #555; text-anchor: middle; }
.col-label.resampled { fill: #d62728; font-weight: bold; }
.later { opacity: .15; }
.current-col { fill: #fffbe6; }
.tok { font: 10px monospace; fill: #333; }
#tip { position: fixed; pointer-events: none; background: #fff; border: 1px solid #aaa;
       padding: 6px 8px; font-size: 12px; max-width: 480px; white-space: pre-wrap; display: none;
       box-shadow: 0 2px 6px rgba(0,0,0,.2); }
table { border-collapse: collapse; margin-top: 8px; font-size: 12px; }
td, th { border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }
td.text { font-family: monospace; white-space: pre-wrap; max-width: 640px; }
.bar { display: inline-block; height: 8px; background: #1f77b4; }
#ess-chart .ess-line { stroke: #1f77b4; fill: none; stroke-width: 1.5; }
#ess-chart .event { fill: #d62728; }
#ess-chart .axis { stroke: #999; }
#ess-chart text { font-size: 10px; fill: #555; }
</style>
</head>
<body>
<h1 id="title"></h1>
<div id="summary"></div>
<div id="controls">
  <label for="step">column</label>
  <input type="range" id="step" min="0" max="0" value="0">
  <span id="step-label"></span>
  <span id="step-ess"></span>
</div>
<div id="tree-wrap"><svg id="tree" xmlns="http://www.w3.org/2000/svg"></svg></div>
<svg id="ess-chart" xmlns="http://www.w3.org/2000/svg" width="600" height="120"></svg>
<div id="posterior"></div>
<table id="particles"><thead><tr><th>particle</th><th>parent</th><th>weight</th><th>log weight</th><th>state</th><th>tokens added</th><th>text so far</th></tr></thead><tbody></tbody></table>
<div id="tip"></div>
<script type="application/json" id="data">__DATA__</script>
<script>
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var data = JSON.parse(document.getElementById("data").textContent);
  var cols = data.columns, n = data.particles;
  var DX = 90, DY = 22, X0 = 50, Y0 = 30, RMAX = 8, RMIN = 1.5;

  function el(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function fmt(x, d) { return x === null ? "-inf" : Number(x).toPrecision(d || 4); }
  function state(nd) { return nd.dead ? "dead" : (nd.finished ? "finished" : "running"); }
  function cx(c) { return X0 + c * DX; }
  function cy(i) { return Y0 + i * DY; }
  function clip(s, k) { return s.length > k ? s.slice(0, k - 1) + "\u2026" : s; }

  document.getElementById("title").textContent = data.title;
  document.title = data.title;
  document.getElementById("summary").textContent =
    n + " particles, " + (cols.length - 1) + " steps, " +
    cols.filter(function (c) { return c.resampled; }).length + " resampling events, log \u1e90 = " +
    fmt(data.log_ml) + (data.decoded ? "" : "  (tokens shown as ids: pass lm= to decode them)");

  var svg = document.getElementById("tree");
  svg.setAttribute("width", X0 + (cols.length - 1) * DX + 160);
  svg.setAttribute("height", Y0 + n * DY + 10);
  var band = el("rect", {x: 0, y: 0, width: DX, height: Y0 + n * DY + 10, "class": "current-col"}, svg);
  var colGroups = [], nodeEls = [], linkEls = [];
  var tip = document.getElementById("tip");

  cols.forEach(function (col, c) {
    var g = el("g", {"class": "col", "data-col": c}, svg);
    colGroups.push(g);
    var lab = el("text", {x: cx(c), y: 14, "class": "col-label" + (col.resampled ? " resampled" : "")}, g);
    lab.textContent = col.label + (col.resampled ? " \u21bb" : "");
    var maxw = Math.max.apply(null, col.nodes.map(function (nd) { return nd.weight; }).concat([1e-300]));
    linkEls.push([]); nodeEls.push([]);
    col.nodes.forEach(function (nd, i) {
      if (c > 0 && nd.parent !== null) {
        var resampled = cols[c - 1].resampled;
        var x1 = cx(c - 1), y1 = cy(nd.parent), x2 = cx(c), y2 = cy(i);
        var link = el("path", {d: "M" + x1 + "," + y1 + " C" + (x1 + DX / 2) + "," + y1 + " " +
                               (x2 - DX / 2) + "," + y2 + " " + x2 + "," + y2,
                               "class": "link" + (resampled ? " resampled" : "")}, g);
        linkEls[c].push(link);
      } else {
        linkEls[c].push(null);
      }
      var ng = el("g", {"class": "node particle " + state(nd), "data-col": c, "data-particle": i}, g);
      if (nd.dead) {
        var s = 4;
        el("path", {d: "M" + (cx(c) - s) + "," + (cy(i) - s) + " L" + (cx(c) + s) + "," + (cy(i) + s) +
                        " M" + (cx(c) - s) + "," + (cy(i) + s) + " L" + (cx(c) + s) + "," + (cy(i) - s)}, ng);
      } else {
        var rel = nd.weight / maxw;
        el("circle", {cx: cx(c), cy: cy(i), r: (RMIN + (RMAX - RMIN) * Math.sqrt(rel)).toFixed(2),
                      "fill-opacity": (0.25 + 0.75 * rel).toFixed(3)}, ng);
      }
      var t = el("text", {x: cx(c) + RMAX + 2, y: cy(i) + 3, "class": "tok"}, ng);
      t.textContent = clip(c === cols.length - 1 ? nd.text : nd.added, 10);
      var title = el("title", {}, ng);
      title.textContent = describe(c, i);
      ng.addEventListener("mousemove", function (ev) {
        tip.textContent = describe(c, i);
        tip.style.display = "block";
        tip.style.left = (ev.clientX + 14) + "px";
        tip.style.top = (ev.clientY + 10) + "px";
      });
      ng.addEventListener("mouseleave", function () { tip.style.display = "none"; });
      ng.addEventListener("click", function () { lineage(c, i); setColumn(c); });
      nodeEls[c].push(ng);
    });
  });

  function describe(c, i) {
    var col = cols[c], nd = col.nodes[i];
    return col.label + ", particle " + i +
      (nd.parent === null || c === 0 ? "" : "\nparent: particle " + nd.parent + " of " + cols[c - 1].label) +
      "\nstate: " + state(nd) +
      "\nweight: " + nd.weight.toPrecision(4) + " (log " + fmt(nd.log_weight) + ")" +
      (c < cols.length - 1 ? "\ntokens added: " + JSON.stringify(nd.added) + "  ids " + JSON.stringify(nd.tokens) : "") +
      "\ntext: " + JSON.stringify(nd.text);
  }

  function lineage(c, i) {
    var marked = document.querySelectorAll(".lineage");
    for (var k = 0; k < marked.length; k++) marked[k].classList.remove("lineage");
    while (c >= 0 && i !== null) {
      nodeEls[c][i].classList.add("lineage");
      if (linkEls[c][i]) linkEls[c][i].classList.add("lineage");
      i = cols[c].nodes[i].parent; c -= 1;
    }
  }

  // ESS trace
  var chart = document.getElementById("ess-chart");
  var steps = cols.slice(0, -1);
  var W = 600, H = 120, L = 40, B = 20, T = 10;
  el("line", {x1: L, y1: H - B, x2: W - 10, y2: H - B, "class": "axis"}, chart);
  el("line", {x1: L, y1: T, x2: L, y2: H - B, "class": "axis"}, chart);
  var ylab = el("text", {x: 2, y: T + 8}, chart); ylab.textContent = "ESS " + n;
  var y0lab = el("text", {x: 2, y: H - B}, chart); y0lab.textContent = "0";
  function ex(k) { return L + (steps.length > 1 ? k * (W - L - 20) / (steps.length - 1) : 0); }
  function ey(v) { return H - B - v / Math.max(n, 1) * (H - B - T); }
  if (steps.length) {
    el("polyline", {points: steps.map(function (c, k) { return ex(k) + "," + ey(c.ess); }).join(" "),
                    "class": "ess-line"}, chart);
    steps.forEach(function (c, k) {
      if (c.resampled) {
        var m = el("circle", {cx: ex(k), cy: ey(c.ess), r: 3.5, "class": "event"}, chart);
        el("title", {}, m).textContent = c.label + ": resampled at ESS " + c.ess.toPrecision(3);
      }
    });
    var xl = el("text", {x: W - 150, y: H - 4}, chart);
    xl.textContent = "step \u2192 (red: resampled)";
  }

  // posterior
  var post = document.getElementById("posterior");
  var ph = document.createElement("h3"); ph.textContent = "Posterior over distinct finished texts"; post.appendChild(ph);
  if (!data.posterior.length) {
    var none = document.createElement("p"); none.textContent = "No particle finished."; post.appendChild(none);
  } else {
    var pt = document.createElement("table"); post.appendChild(pt);
    data.posterior.forEach(function (row) {
      var tr = document.createElement("tr"); pt.appendChild(tr);
      var td1 = document.createElement("td"); td1.className = "text"; td1.textContent = JSON.stringify(row[0]); tr.appendChild(td1);
      var td2 = document.createElement("td"); tr.appendChild(td2);
      var bar = document.createElement("span"); bar.className = "bar"; bar.style.width = Math.round(200 * row[1]) + "px";
      td2.appendChild(bar); td2.appendChild(document.createTextNode(" " + row[1].toPrecision(3)));
    });
  }

  // slider + table
  var slider = document.getElementById("step");
  slider.max = cols.length - 1;
  var tbody = document.querySelector("#particles tbody");
  function setColumn(c) {
    slider.value = c;
    band.setAttribute("x", cx(c) - DX / 2);
    colGroups.forEach(function (g, k) { g.classList.toggle("later", k > c); });
    var col = cols[c];
    document.getElementById("step-label").textContent = col.label;
    document.getElementById("step-ess").textContent = "ESS " + col.ess.toPrecision(3) + (col.resampled ? ", resampled after this step" : "");
    while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
    col.nodes.forEach(function (nd, i) {
      var tr = document.createElement("tr"); tr.className = "row-particle";
      var cells = [String(i), nd.parent === null || c === 0 ? "" : String(nd.parent), null, fmt(nd.log_weight),
                   state(nd), c === cols.length - 1 ? "" : nd.added, nd.text];
      cells.forEach(function (v, k) {
        var td = document.createElement("td");
        if (k === 2) {
          var bar = document.createElement("span"); bar.className = "bar";
          bar.style.width = Math.round(80 * nd.weight) + "px";
          td.appendChild(bar); td.appendChild(document.createTextNode(" " + nd.weight.toPrecision(3)));
        } else {
          td.textContent = v;
          if (k >= 5) td.className = "text";
        }
        tr.appendChild(td);
      });
      tbody.appendChild(tr);
    });
  }
  slider.addEventListener("input", function () { setColumn(Number(slider.value)); });
  document.addEventListener("keydown", function (ev) {
    if (ev.key === "ArrowRight") setColumn(Math.min(cols.length - 1, Number(slider.value) + 1));
    if (ev.key === "ArrowLeft") setColumn(Math.max(0, Number(slider.value) - 1));
  });
  setColumn(cols.length - 1);
  document.documentElement.setAttribute("data-rendered", String(document.querySelectorAll("g.particle").length));
})();
</script>
</body>
</html>
"""
