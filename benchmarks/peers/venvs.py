"""The peer engines' virtual environments: ``.venv-peers/<engine>/`` beside the checkout.

Each is built the same way, never touching the project's own environment:

    python -m venv .venv-peers/<engine>
    .venv-peers/<engine>/bin/python -m pip install torch==TORCH      (the CPU build first, so
                                                                     the peer's own torch pin
                                                                     resolves to it)
    .venv-peers/<engine>/bin/python -m pip install <PEERS[engine]>   (the peer from PyPI)

and the versions actually installed are read back with ``pip freeze`` into
``.venv-peers/<engine>/versions.json`` (the records carry them). Transformers is pinned to the
major version smc-steer runs with, so every engine loads the same converted model the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from peers.genlm_control import REQUIREMENTS as GENLM_REQUIREMENTS

ROOT = Path(__file__).resolve().parents[2]
VENVS = ROOT / ".venv-peers"

#: the torch every venv gets first: the CPU build the project runs with
TORCH = "torch==2.13.0"
#: transformers for the masking peers: the major version smc-steer runs with (5.x)
TRANSFORMERS = "transformers>=5,<6"

#: what pip installs after TORCH, per engine (genlm-control's recipe lives with its runner and
#: leaves transformers to genlm-control's own requirement)
PEERS: dict[str, list[str]] = {
    "llguidance": ["llguidance==1.9.1", TRANSFORMERS],
    "xgrammar": ["xgrammar==0.2.8", TRANSFORMERS],
    "outlines": ["outlines==1.3.3", TRANSFORMERS],
    "genlm-control": list(GENLM_REQUIREMENTS),
}

#: the packages whose versions a record names
REPORTED = ("torch", "transformers", "llguidance", "xgrammar", "outlines", "outlines-core",
            "genlm-control", "genlm-backend", "genlm-grammar")


def python_of(engine: str) -> Path:
    """The interpreter of ``engine``'s venv (it may not exist yet: see ``exists``)."""
    return VENVS / engine / "bin" / "python"


def exists(engine: str) -> bool:
    """True when ``engine``'s venv was built completely (its versions file is written last)."""
    return (VENVS / engine / "versions.json").is_file() and python_of(engine).is_file()


def versions(engine: str) -> dict[str, str]:
    """The reported packages' versions in ``engine``'s venv, as ``build`` recorded them."""
    return json.loads((VENVS / engine / "versions.json").read_text())


def build(engine: str, log=print) -> dict[str, str]:
    """Create ``.venv-peers/<engine>`` (see the module docstring) and return its versions."""
    if engine not in PEERS:
        raise SystemExit(f"unknown peer {engine!r}: one of {', '.join(PEERS)}")
    target = VENVS / engine
    py = python_of(engine)
    if not py.is_file():
        log(f"# {engine}: python -m venv {target}")
        subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
    for reqs in ([TORCH], PEERS[engine]):
        log(f"# {engine}: pip install {' '.join(reqs)}")
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", *reqs], check=True)
    frozen = subprocess.run([str(py), "-m", "pip", "freeze"], check=True, capture_output=True,
                            text=True).stdout
    found = {}
    for line in frozen.splitlines():
        name, sep, version = line.partition("==")
        if sep and name.lower().replace("_", "-") in REPORTED:
            found[name.lower().replace("_", "-")] = version
    (target / "versions.json").write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    log(f"# {engine}: {found}")
    return found
