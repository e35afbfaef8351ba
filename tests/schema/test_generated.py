"""The generated differential suite: pandera is the oracle (``_generate.py`` draws the
examples, ``_differential.py`` compares).  A fixed-seed slice runs here; the long run is
``python tests/schema/_generate.py --examples N --seed S`` (docs: how-to/schemas)."""

from __future__ import annotations

import os

from _differential import RULES, check_generated
from _generate import Generated, describe, example
from hypothesis import HealthCheck, given, seed, settings

from datacheck.schema._differences import DIFFERENCES

EXAMPLES = int(os.environ.get("DATACHECK_DIFF_EXAMPLES", "120"))


def test_every_difference_has_its_rule() -> None:
    assert set(RULES) == set(DIFFERENCES)


@seed(20261201)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(gen=example())
def test_generated_examples_agree_with_pandera(gen: Generated, tmp_path_factory) -> None:
    out = check_generated(gen, tmp_path_factory.mktemp("g"))
    assert out.status != "disagree", (describe(gen.pandera_schema), gen.table, out.problems)
    assert out.status != "refused", (describe(gen.pandera_schema), out.problems)


@seed(7)
@settings(max_examples=4, deadline=None, database=None)
@given(gen=example())
def test_generated_examples_through_the_cli(gen: Generated, tmp_path_factory) -> None:
    """The real CLI on pandera's YAML of the schema: exit 0/1 with the same answer, or 2 with
    one line (never 3)."""
    out = check_generated(gen, tmp_path_factory.mktemp("c"), cli=True)
    assert out.status != "disagree", (describe(gen.pandera_schema), gen.table, out.problems)
