"""The helpers that replaced duplicated code: one JSON-number conversion (Result.to_dict and the
genealogy page), one normalization of log weights (samplers, Result.weights, the genealogy page)."""

import json
import math

import numpy as np

from smc.core.logmath import NEG_INF, normalized
from smc.engine.result import Result
from smc.programs.model import Sample
from smc.core.logmath import json_number


def test_json_number_writes_non_finite_values_as_null():
    assert json_number(NEG_INF) is None
    assert json_number(math.inf) is None and json_number(math.nan) is None
    assert json_number(-1.5) == -1.5 and type(json_number(np.float32(2.0))) is float


def test_normalized_is_exp_of_logw_minus_logsumexp():
    w, total = normalized([math.log(1.0), math.log(3.0), NEG_INF])
    assert math.isclose(total, math.log(4.0))
    np.testing.assert_allclose(w, [0.25, 0.75, 0.0])
    w, total = normalized([NEG_INF, NEG_INF])
    assert total == NEG_INF and w.tolist() == [0.0, 0.0]
    w, total = normalized([])
    assert total == NEG_INF and w.shape == (0,)


def test_result_uses_them():
    r = Result(
        samples=[Sample("a", (0,), math.log(0.25), True), Sample("b", (1,), math.log(0.75), True),
                 Sample("c", (2,), NEG_INF, False)],
        log_ml=NEG_INF,
    )
    np.testing.assert_allclose(r.weights, [0.25, 0.75, 0.0])
    d = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    assert d["log_ml"] is None and d["samples"][2]["log_weight"] is None
    assert math.isclose(d["samples"][1]["log_weight"], math.log(0.75))
