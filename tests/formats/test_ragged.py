"""Samples of differing shapes handed on as one :class:`~datacheck.formats.Ragged` are checked
exactly as the same samples one chunk each: every check, every schema rule, at the same rows
(a property over random shapes, dtypes and planted values)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datacheck.engine._result import Collector
from datacheck.engine._unit import _check_chunk
from datacheck.formats._tensor_common import SampleBatcher
from datacheck.schema import load_schema

PLANTS = [np.nan, np.inf, -np.inf, 1e30, 7e4, -3.0, 0.5]
"""Values planted (float16 holds 1e30 as Inf, as a writer casting it would)."""
SCHEMA = "tensors:\n  keys:\n    x: {range: [-1, 10], shape: ['*', 3]}\n"


@st.composite
def samples(draw: st.DrawFn) -> list[dict[str, np.ndarray]]:
    dtype = draw(st.sampled_from(["<f4", "<f8", "<f2", "<i8", "<c8"]))
    out = []
    for _ in range(draw(st.integers(1, 12))):
        n = draw(st.integers(0, 6))
        x = np.full(n, 0.25 if dtype[1] in "fc" else 1, dtype)
        if n and draw(st.booleans()):
            with np.errstate(over="ignore"):
                x[draw(st.integers(0, n - 1))] = draw(
                    st.sampled_from(PLANTS if dtype[1] in "fc" else [99, -5])
                )
        out.append({"x": x})
    return out


def _findings(batcher: SampleBatcher, rows: list[dict[str, np.ndarray]], schema) -> list:
    col = Collector("f")
    chunks = [c for r, s in enumerate(rows) for c in batcher.add(r, s)]
    chunks += list(batcher.finish(len(rows)))
    for chunk in chunks:
        _check_chunk(chunk, schema, col)
    if not col.tables:
        return []
    return sorted(pa.concat_tables(col.tables).to_pylist(), key=repr)


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("ragged") / "s.yaml"
    path.write_text(SCHEMA)
    return load_schema(str(path))


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=samples(), with_schema=st.booleans())
def test_ragged_samples_are_checked_as_each_one_alone(schema, rows, with_schema):
    schema = schema if with_schema else None
    alone = _findings(SampleBatcher(chunk_bytes=1), rows, schema)  # a chunk per sample
    assert _findings(SampleBatcher(ragged=True), rows, schema) == alone
