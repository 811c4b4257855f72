"""potentials.testing is the contract as users get it: a test module outside this repository,
run by a plain pytest (no project config, no asyncio plugin), passes for a correct constraint and
fails for one whose mask_key claim is false."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

USER_TESTS = '''
from potentials.base import BytePotential
from potentials.testing import MaskKeyContract


class AtMostDigits(BytePotential):
    def __init__(self, k, honest=True):
        self.k, self.honest = k, honest

    def initial(self):
        return 0

    def advance(self, state, data):
        n = state + sum(b in b"0123456789" for b in data)
        return n if n <= self.k else None

    async def state_complete(self, state):
        return 0.0

    def mask_key(self, state):
        return state if self.honest else 0  # the dishonest key merges states with other futures


class TestAtMostDigits(MaskKeyContract):
    def potential(self):
        return AtMostDigits(2)

    def contexts(self):
        return [b"", b"a1", b"12", b"123", b"x9y", b"7"]


class TestDishonestKey(TestAtMostDigits):
    def potential(self):
        return AtMostDigits(2, honest=False)
'''


def test_contract_runs_outside_the_package(tmp_path):
    (tmp_path / "test_user_constraint.py").write_text(USER_TESTS)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:asyncio", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
    )
    summary = out.stdout.strip().splitlines()[-1]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    failed = int(re.search(r"(\d+) failed", summary).group(1))
    # every check of the honest class passes; the dishonest key is caught by the mask-key check
    assert failed >= 1 and passed >= 6, out.stdout[-3000:]
    failures = re.findall(r"FAILED \S+::(\w+)::(\w+)", out.stdout)
    assert failures and all(cls == "TestDishonestKey" for cls, _ in failures), out.stdout[-3000:]
    assert any("mask_key" in name for _, name in failures), failures
