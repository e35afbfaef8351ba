"""``datacheck infer``: the schema it writes, its round trip through pandera, and the workflow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import datacheck
from datacheck._infer import infer

ROWS = 3000
FEATURES = ("f0", "f1", "f2", "f3")


def _dataset(root: Path, clean: int = 6, scaled: bool = True, seed: int = 0) -> list[Path]:
    """Standardised features, a never-standardised ``raw``, labels, names, embeddings.

    The last shard (when ``scaled``) has every float column x1000.
    """
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(clean + int(scaled)):
        cols: dict[str, object] = {
            f: rng.standard_normal(ROWS).astype(np.float32) for f in FEATURES
        }
        cols["raw"] = rng.normal(50, 20, ROWS)
        cols["label"] = rng.integers(0, 10, ROWS)
        cols["name"] = pa.array(np.array(["a", "b", None], dtype=object)[rng.integers(0, 3, ROWS)])
        cols["emb"] = pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(ROWS * 4)), 4)
        if i == clean:
            for f in (*FEATURES, "raw"):
                cols[f] = cols[f] * 1000  # type: ignore[operator]
        path = root / f"shard{i}.parquet"
        pq.write_table(pa.table(cols), path)
        paths.append(path)
    return paths


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "datacheck", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.slow
def test_done_means_infer_then_scan_reports_exactly_the_scaled_shard_and_raw_column(
    tmp_path: Path,
) -> None:
    paths = _dataset(tmp_path / "data")
    clean, scaled = paths[:-1], paths[-1]
    schema = tmp_path / "schemas" / "train.yaml"
    auto = _run("infer", *clean, "--out", schema)
    assert auto.returncode == 0, auto.stderr
    assert "'raw' is not standardised (mean 49.9" in auto.stderr  # auto leaves it unmarked
    assert "raw" not in datacheck.load_schema(schema).columns or (
        datacheck.load_schema(schema).columns["raw"].rules.normalized is None
    )
    inferred = _run("infer", *clean, "--out", schema, "--normalized", "f0,f1,f2,f3,raw")
    assert inferred.returncode == 0, inferred.stderr
    assert "'raw' is marked normalized but is not standardised" in inferred.stderr
    result = _run(
        "scan", tmp_path / "data", "--schema", schema, "--out", tmp_path / "rep", "--no-progress"
    )
    assert result.returncode == 1, result.stderr
    report = datacheck.load_report(tmp_path / "rep")
    f = report.findings
    f["shard"] = [Path(p).name for p in f.path]
    drift = f[f.check == "drift"]
    assert set(drift.shard) == {scaled.name}
    assert set(drift.column) == {*FEATURES, "raw"}  # the scaled columns, one finding each
    assert drift.groupby("column").size().eq(1).all()
    unnorm = f[f.check == "unnormalized"]
    assert set(unnorm.loc[unnorm.shard != scaled.name, "column"]) == {"raw"}
    assert set(unnorm.loc[unnorm.column == "raw", "shard"]) == {p.name for p in paths}
    on_clean = f[f.shard != scaled.name]
    assert set(zip(on_clean.column, on_clean.check, strict=True)) == {("raw", "unnormalized")}
    assert len(on_clean) == len(clean)  # one per clean shard, nothing else
    assert (tmp_path / "rep" / "profile.json").exists()


def test_schema_round_trips_through_datacheck_and_pandera(tmp_path: Path) -> None:
    paths = _dataset(tmp_path / "data", clean=3, scaled=False)
    out = tmp_path / "s.yaml"
    result = infer(paths, out=out, executor="inprocess")
    text = out.read_text()
    assert text == result.text and text.startswith("# pandera schema inferred by datacheck")
    assert "# float | rows 9,000" in text and "p50" in text  # commented statistics
    compiled = datacheck.load_schema(out)
    f0 = compiled.columns["f0"].rules
    assert f0.reference is not None and f0.normalized is not None
    assert f0.reference.mean == pytest.approx(result.columns["f0"]["mean"], abs=1e-3)
    assert any(r.check == "extreme" for r in f0.ranges)
    assert compiled.columns["label"].rules.normalized is None
    import pandera.pandas as pa_

    schema = pa_.DataFrameSchema.from_yaml(text)
    assert schema.columns["name"].nullable and not schema.columns["f0"].nullable
    assert str(schema.columns["label"].dtype) == "int64"
    frame = pq.read_table(paths[0]).to_pandas()
    scalar = frame.drop(columns=["emb", "name", "raw"])
    schema.select_columns(list(scalar.columns)).validate(scalar)  # clean data passes in pandera
    assert (
        yaml.safe_load(text)["columns"]["f0"]["checks"][-1]["options"]["check_name"] == "normalized"
    )
    assert "normalized" not in _checks(text, "raw")  # never standardised: not marked


def test_ranges_margin_nullable_and_finite(tmp_path: Path) -> None:
    t = pa.table(
        {
            "pos": pa.array([0.5, 1.0, 2.0, 10.5]),
            "n": pa.array([1.0, None, 3.0, 4.0]),
            "i": pa.array([3, 5, 7, 9], pa.int32()),
            "big": pa.array([1e-7, 2e-7, 3e-7, 4e-7]),
            "ni": pa.array([1, None, 3, 4], pa.int64()),
        }
    )
    pq.write_table(t, tmp_path / "a.parquet")
    result = infer(
        tmp_path / "a.parquet",
        out=tmp_path / "s.yaml",
        margin=0.1,
        normalized="none",
        executor="inprocess",
    )
    doc = yaml.safe_load(result.text)["columns"]
    assert (doc["ni"]["dtype"], doc["i"]["dtype"]) == ("Int64", "int32")  # pandas' nullable int
    rescan = datacheck.scan(tmp_path / "a.parquet", tmp_path / "s.yaml", out=tmp_path / "o")
    assert rescan.summary["sites"] == {}  # the data it was inferred from passes
    ranges = {
        c: next(k for k in doc[c]["checks"] if k["options"]["check_name"] == "in_range")
        for c in doc
    }
    # A float range is widened by the margin, and never tighter than mean +/- zscore_max std
    # (here 3.5 + 6 * 4.06: four values say little about the tail); never below 0 when the
    # column never was negative.
    pos = np.array([0.5, 1.0, 2.0, 10.5])
    assert ranges["pos"]["min_value"] == 0.0
    assert ranges["pos"]["max_value"] == pytest.approx(pos.mean() + 6 * pos.std(), rel=1e-3)
    assert ranges["n"]["max_value"] >= 4.0 + 0.3
    # An integer column with few possible values: its exact range, an error.
    assert (ranges["i"]["min_value"], ranges["i"]["max_value"]) == (3, 9)
    assert not any("raise_warning" in r["options"] for r in ranges.values())
    assert isinstance(ranges["big"]["max_value"], float)  # 4.3e-07 read back as a float
    assert ranges["big"]["max_value"] >= 4e-7 and ranges["big"]["min_value"] <= 1e-7
    assert doc["n"]["nullable"] is True and doc["pos"]["nullable"] is False
    names = {c: [k["options"]["check_name"] for k in doc[c]["checks"]] for c in doc}
    assert names["pos"][0] == "finite" and "finite" not in names["i"]
    assert not any("normalized" in v for v in names.values())


def test_normalized_option(tmp_path: Path) -> None:
    paths = _dataset(tmp_path / "d", clean=1, scaled=False)
    auto = infer(paths, executor="inprocess")
    marked = {c for c in auto.columns if "normalized" in _checks(auto.text, c)}
    assert marked == set(FEATURES)  # raw, never standardised, is named in a note instead
    assert any("'raw' is not standardised" in n and "--normalized" in n for n in auto.notes)
    chosen = infer(paths, normalized=["f1"], executor="inprocess")
    np.save(tmp_path / "d" / "t.npy", np.zeros((3, 2)))
    with_tensor = infer(tmp_path / "d", normalized="none", executor="inprocess")
    assert with_tensor.files == 1 and any(
        "tensors are not inferred" in n for n in with_tensor.notes
    )
    assert {c for c in chosen.columns if "normalized" in _checks(chosen.text, c)} == {"f1"}
    with pytest.raises(datacheck.UsageError, match="no column 'nope'"):
        infer(paths, normalized=["nope"], executor="inprocess")
    with pytest.raises(datacheck.UsageError, match="margin"):
        infer(paths, margin=-1)


def _checks(text: str, column: str) -> list[str]:
    body = yaml.safe_load(text)["columns"][column]
    return [c["options"]["check_name"] for c in body.get("checks") or []]


def test_cli_infer_errors_and_help(tmp_path: Path) -> None:
    missing = _run("infer", tmp_path / "nope", "--out", tmp_path / "s.yaml")
    assert missing.returncode == 2 and missing.stderr.startswith("datacheck: error:")
    assert not (tmp_path / "s.yaml").exists()
    helped = _run("infer", "--help")
    assert helped.returncode == 0 and "--normalized" in helped.stdout


def test_column_names_needing_quotes(tmp_path: Path) -> None:
    pd.DataFrame({"a b": [1.0, 2.0], "yes": [1.0, 3.0], "x:y": [2.0, 2.5]}).to_parquet(
        tmp_path / "q.parquet"
    )
    result = infer(tmp_path / "q.parquet", out=tmp_path / "q.yaml", executor="inprocess")
    assert set(yaml.safe_load(result.text)["columns"]) == {"a b", "yes", "x:y"}
    assert set(datacheck.load_schema(tmp_path / "q.yaml").columns) == {"a b", "yes", "x:y"}


def test_infer_then_scan_the_same_clean_data_has_no_findings(tmp_path: Path) -> None:
    """The demo's cleaned copy: ``embedding`` is absent from the CSV shard, ``id`` is a running
    index whose shards differ from the pooled statistics (std x4): the inferred schema must
    neither call the column missing nor flag the shards it was inferred from."""
    demo, rep, clean = tmp_path / "demo", tmp_path / "r", tmp_path / "clean2"
    made = _run("demo", demo)
    assert made.returncode == 0, made.stderr
    first = _run("scan", demo, "--schema", demo / "schema.yaml", "--out", rep, "--no-progress")
    assert first.returncode == 1, first.stderr  # the demo plants faults
    datacheck.load_report(rep).clean_copy(clean)
    schema = tmp_path / "inf.yaml"
    inferred = _run("infer", clean, "--out", schema)
    assert inferred.returncode == 0, inferred.stderr
    cols = yaml.safe_load(schema.read_text())["columns"]
    assert cols["embedding"]["required"] is False
    assert all(c.get("required", True) for name, c in cols.items() if name != "embedding")
    ref = [c for c in cols["id"]["checks"] if c["options"]["check_name"] == "reference_stats"]
    assert ref[0]["max_std_ratio"] == float("inf")  # id's own shards are x4 off the pooled std
    assert cols["x0"]["checks"][2]["max_std_ratio"] == 3.0  # real features keep drift on
    assert "drift (mean shift / std ratio) off" in schema.read_text()
    second = _run("scan", clean, "--schema", schema, "--out", tmp_path / "r2", "--no-progress")
    assert second.returncode == 0, second.stdout + second.stderr
    assert datacheck.load_report(tmp_path / "r2").findings.empty


def test_zscore_max_is_raised_to_cover_the_profiled_values(tmp_path: Path) -> None:
    x = np.random.default_rng(1).standard_normal(5000)
    x[17] = 12.0  # a rare but genuine value in the trusted data
    pq.write_table(pa.table({"x": x}), tmp_path / "a.parquet")
    out = tmp_path / "s.yaml"
    result = infer(tmp_path / "a.parquet", out=out, normalized="none", executor="inprocess")
    ref = yaml.safe_load(result.text)["columns"]["x"]["checks"][-1]
    assert ref["options"]["check_name"] == "reference_stats"
    assert ref["zscore_max"] > 12.0 and "raised from 6.0" in result.text
    report = datacheck.scan(
        str(tmp_path / "a.parquet"), executor="inprocess", schema=datacheck.load_schema(out)
    )
    assert report.findings.empty


def test_inferred_schema_passes_pandera_on_the_data_it_came_from(tmp_path: Path) -> None:
    """Issue 12 item 21: nullable ints (pandas reads them as float64) and vector columns."""
    import pandera.pandas as pa_

    from datacheck.checks._pandas import register_pandera_checks

    rng = np.random.default_rng(1)
    n = 200
    table = pa.table(
        {
            "x": rng.standard_normal(n),
            "count": pa.array([None if i % 7 == 0 else int(i % 13) for i in range(n)], pa.int64()),
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 3)), 3),
            "vec": pa.array(
                [list(rng.standard_normal(2)) for _ in range(n)], pa.list_(pa.float64())
            ),
            "name": pa.array(["a", "b"] * (n // 2)),
        }
    )
    data = tmp_path / "d.parquet"
    pq.write_table(table, data)
    out = tmp_path / "s.yaml"
    infer(data, out=out)
    register_pandera_checks()
    schema = pa_.DataFrameSchema.from_yaml(out)
    schema.validate(pd.read_parquet(data), lazy=True)  # raises SchemaErrors on any failure
    assert datacheck.scan(data, schema=out, out=tmp_path / "o").findings.empty


def test_id_like_columns_get_no_value_checks(tmp_path: Path) -> None:
    """Issue 12 item 22: a later id is not an extreme value."""
    d = tmp_path / "d"
    d.mkdir()
    pq.write_table(
        pa.table({"user_id": np.arange(1000), "x": np.linspace(0, 1, 1000)}), d / "a.parquet"
    )
    result = infer(d, out=tmp_path / "s.yaml")
    assert any("user_id" in n and "id" in n for n in result.notes)
    later = tmp_path / "later.parquet"
    pq.write_table(
        pa.table({"user_id": np.arange(10**6, 10**6 + 50), "x": np.linspace(0, 1, 50)}), later
    )
    assert datacheck.scan(later, schema=tmp_path / "s.yaml", out=tmp_path / "o").findings.empty


def test_infer_with_nothing_readable_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really")
    res = _run("infer", bad, "--out", tmp_path / "s.yaml")
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "no readable table" in res.stderr
    assert not (tmp_path / "s.yaml").exists()


def _dirty(root: Path) -> list[Path]:
    """Four shards written by pandas: a bad-join column (all null), a NaN, a shard x1e6."""
    rng = np.random.default_rng(4)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(4):
        frame = pd.DataFrame(
            {
                "k": np.arange(500) + 500 * i,
                "x": rng.standard_normal(500) * (1e6 if i == 3 else 1.0),
                "label": rng.integers(0, 10, 500),
            }
        )
        frame = frame.merge(pd.DataFrame({"k": [-1], "joined": [1.0]}), on="k", how="left")
        if i == 1:
            frame.loc[7, "x"] = np.inf
        paths.append(root / f"part-{i}.parquet")
        frame.to_parquet(paths[-1])
    return paths


def test_infer_refuses_to_learn_from_damage(tmp_path: Path) -> None:
    paths = _dirty(tmp_path / "d")
    out = tmp_path / "s.yaml"
    res = _run("infer", tmp_path / "d", "--out", out)
    assert res.returncode == 1, res.stdout + res.stderr
    assert not out.exists()
    damage = [ln for ln in res.stderr.splitlines() if ln.startswith("damage: ")]
    assert any(ln.startswith("damage: joined: all null (2,000 of 2,000 rows)") for ln in damage)
    (x,) = [ln for ln in damage if ln.startswith("damage: x: ")]
    assert "1 Inf" in x and "beyond float16" in x and "a shard unlike the others, part-3" in x
    assert not any(ln.startswith(("damage: k:", "damage: label:")) for ln in damage)
    assert "not written" in res.stderr and "--allow-dirty" in res.stderr
    # Told to, it learns from it as it is, and the schema says what it was learned from.
    res = _run("infer", tmp_path / "d", "--out", out, "--allow-dirty")
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    assert "# DAMAGE seen in the reference data, learned from as it is (--allow-dirty):" in text
    assert "#   joined: all null (2,000 of 2,000 rows)" in text
    datacheck.load_schema(out)
    # The clean shards alone: nothing to report.
    clean = [p for p in paths if p.name in ("part-0.parquet", "part-2.parquet")]
    result = infer(clean, out=out, executor="inprocess", normalized="none")
    assert [d.split(":")[0] for d in result.damage] == ["joined"]  # the join failed there too
    frame = pd.read_parquet(clean[0]).drop(columns=["joined"])
    frame.to_parquet(tmp_path / "fixed.parquet")
    result = infer(tmp_path / "fixed.parquet", out=out, executor="inprocess")
    assert result.damage == [] and result.written


def test_infer_writes_exact_label_ranges_as_errors(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"label": rng.integers(0, 10, 2000), "x": rng.standard_normal(2000)})
    frame.to_parquet(tmp_path / "ref.parquet")
    schema = tmp_path / "s.yaml"
    infer(tmp_path / "ref.parquet", out=schema, executor="inprocess")
    new = pd.DataFrame({"label": [0, 9, 10, 12, -1, 5], "x": [0.1, 2.0, -1.0, 0.3, 0.0, 0.5]})
    new.to_parquet(tmp_path / "new.parquet")
    report = datacheck.scan(tmp_path / "new.parquet", schema, out=tmp_path / "o")
    f = report.findings
    bad = f[f.column == "label"]
    assert sorted(bad.row.astype(int)) == [2, 3, 4]  # 10, 12 and -1: outside [0, 9]
    assert set(bad.severity) == {"error"} and report.exit_code() == 1
    assert set(f.column) == {"label"}  # x within mean +/- 6 std: no false range error


def test_a_column_absent_from_part_of_the_reference_is_optional(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    d = tmp_path / "d"
    d.mkdir()
    pd.DataFrame({"x": rng.standard_normal(300), "extra": rng.standard_normal(300)}).to_parquet(
        d / "a.parquet"
    )
    pd.DataFrame({"x": rng.standard_normal(300)}).to_parquet(d / "b.parquet")
    schema = tmp_path / "s.yaml"
    infer(d, out=schema, executor="inprocess")
    assert yaml.safe_load(schema.read_text())["columns"]["extra"]["required"] is False
    report = datacheck.scan(d, schema, out=tmp_path / "o", executor="inprocess")
    assert report.exit_code() == 0, report.summary["sites"]
