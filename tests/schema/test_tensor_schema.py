"""The ``tensors:`` schema section: parsing, every user mistake, and the rules in scans."""

from __future__ import annotations

import io
import tarfile
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import datacheck
from datacheck.errors import SchemaError
from datacheck.schema import load_schema
from datacheck.schema._tensors import match_shape, parse_tensor_section

PANDERA_COLUMNS = """\
schema_type: dataframe
version: 0.20.0
columns:
  v:
    title: null
    description: null
    dtype: float64
    nullable: false
    checks:
      - value: 10
        options: {check_name: max_abs, raise_warning: false, ignore_na: true}
    unique: false
    coerce: false
    required: true
    regex: false
"""


def write_schema(tmp_path: Path, text: str, with_columns: bool = False) -> Path:
    path = tmp_path / "schema.yaml"
    path.write_text((PANDERA_COLUMNS if with_columns else "") + textwrap.dedent(text))
    return path


def scan(path: Path, schema: Path) -> datacheck.Report:
    return datacheck.scan(str(path), schema=str(schema), executor="inprocess", workers=1)


def rows(report: datacheck.Report) -> set[tuple]:
    f = report.findings
    return {
        (None if pd.isna(r.row) else int(r.row), r.column, r.check, r.value) for r in f.itertuples()
    }


def test_full_section_parses(tmp_path: Path) -> None:
    path = write_schema(
        tmp_path,
        """
        tensors:
          strict: true
          keys:
            image:
              dtype: [float16, float32]
              shape: [*, 3, 224, 224]
              max_abs: 100
              range: {min: -1}
              fits: bf16
            label: {dtype: int64, shape: "[*]", range: [0, 9], required: false}
            any:
        """,
    )
    ts = load_schema(path).tensors
    assert ts.strict
    img = ts.keys["image"]
    assert img.dtypes == ("float16", "float32")
    assert img.shape == ("*", 3, 224, 224)
    assert img.max_abs == 100 and img.range == (-1.0, None) and img.fits == "bf16_safe"
    assert ts.keys["label"].shape == ("*",) and not ts.keys["label"].required
    assert ts.keys["any"].shape is None


def test_pandera_columns_still_load_beside_tensors(tmp_path: Path) -> None:
    path = write_schema(tmp_path, "tensors:\n  keys:\n    x: {dtype: float32}\n", with_columns=True)
    compiled = load_schema(path)
    assert "v" in compiled.columns
    assert compiled.tensors.keys["x"].dtypes == ("float32",)


def test_pandera_only_schema_has_no_tensor_section(tmp_path: Path) -> None:
    compiled = load_schema(write_schema(tmp_path, "", with_columns=True))
    assert compiled.tensors is None and "v" in compiled.columns


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("tensors: [1, 2]", "expected a mapping with 'keys'"),
        ("tensors:\n  image: {dtype: float32}", "unknown setting 'image'"),
        ("tensors:\n  key:\n    x: {}", "did you mean 'keys'?"),
        ("tensors:\n  keys: [x]", "'keys' must map tensor keys to rules"),
        ("tensors:\n  strict: maybe\n  keys: {}", "strict must be true or false"),
        ("tensors:\n  keys:\n    x: 3", "tensor 'x': expected a mapping of rules"),
        (
            "tensors:\n  keys:\n    x: {dtyp: float32}",
            "unknown rule 'dtyp' (did you mean 'dtype'?)",
        ),
        (
            "tensors:\n  keys:\n    x: {dtype: flaot32}",
            "unknown dtype 'flaot32' (did you mean 'float32'?)",
        ),
        ("tensors:\n  keys:\n    x: {dtype: str}", "is not a numeric tensor dtype"),
        ("tensors:\n  keys:\n    x: {dtype: 3}", "dtype must be a name"),
        ("tensors:\n  keys:\n    x: {dtype: []}", "dtype list is empty"),
        ("tensors:\n  keys:\n    x: {shape: 3}", "shape must be a list"),
        ("tensors:\n  keys:\n    x: {shape: '3, 4'}", "shape must be a list"),
        ("tensors:\n  keys:\n    x: {shape: [*, -3]}", "shape dim -3 is not a size"),
        ("tensors:\n  keys:\n    x: {shape: [*, 2.5]}", "shape dim 2.5"),
        ("tensors:\n  keys:\n    x: {shape: [..., 3, ...]}", "more than one '...'"),
        ("tensors:\n  keys:\n    x: {max_abs: -1}", "max_abs must be > 0"),
        ("tensors:\n  keys:\n    x: {max_abs: big}", "max_abs: expected a number"),
        ("tensors:\n  keys:\n    x: {max_abs: true}", "max_abs: expected a number"),
        ("tensors:\n  keys:\n    x: {range: [1, 0]}", "range min 1 is above max 0"),
        ("tensors:\n  keys:\n    x: {range: [1]}", "range must be [min, max]"),
        ("tensors:\n  keys:\n    x: {range: [null, null]}", "range needs a min or a max"),
        ("tensors:\n  keys:\n    x: {range: {lo: 1}}", "range takes min and max"),
        ("tensors:\n  keys:\n    x: {range: [a, 1]}", "range min: expected a number"),
        ("tensors:\n  keys:\n    x: {fits: fp8}", "fits must be fp16 or bf16"),
        ("tensors:\n  keys:\n    x: {required: yes please}", "required must be true or false"),
    ],
)
def test_every_mistake_is_a_clear_schema_error(section: str, message: str, tmp_path: Path) -> None:
    path = write_schema(tmp_path, section)
    with pytest.raises(SchemaError) as info:
        load_schema(path)
    text = str(info.value)
    assert message in text
    assert str(path) in text and "\n" not in text


def test_invalid_yaml_is_still_reported_with_its_line(tmp_path: Path) -> None:
    path = write_schema(tmp_path, "tensors:\n  keys:\n    x: {shape: [*, 3}\n")
    with pytest.raises(SchemaError, match=r"line 3, column \d+: invalid YAML \(.+\)"):
        load_schema(path)


def test_parse_section_directly() -> None:
    ts = parse_tensor_section({"keys": {"x": {"shape": ["*", "...", 3]}}}, "'s.yaml'")
    assert ts.keys["x"].shape == ("*", "...", 3)
    assert parse_tensor_section({"keys": None}, "'s'").keys == {}


@pytest.mark.parametrize(
    ("pattern", "shape", "ok"),
    [
        (("*", 3, 224, 224), (10, 3, 224, 224), True),
        (("*", 3, 224, 224), (10, 4, 224, 224), False),
        (("*", 3, 224, 224), (10, 3, 224), False),
        (("*", "..."), (10,), True),
        (("*", "..."), (10, 2, 3), True),
        (("...", 3), (3,), True),
        (("...", 3), (5, 4), False),
        ((), (), True),
        (("*",), (None,), True),
        ((7, 2), (None, 2), True),
    ],
)
def test_match_shape(pattern: tuple, shape: tuple, ok: bool) -> None:
    assert match_shape(pattern, shape) is ok


# --- the rules in scans ----------------------------------------------------------------------

SCHEMA = """
tensors:
  keys:
    img:
      dtype: float32
      shape: [*, 3, 4, 4]
      max_abs: 50
      fits: fp16
    y:
      dtype: int64
      range: [0, 9]
    mask:
      required: true
"""


def test_schema_rules_in_a_scan(tmp_path: Path) -> None:
    x = np.zeros((20, 3, 4, 4), dtype=np.float32)
    x[2, 0, 0, 0] = 60.0  # beyond max_abs 50 (error), fits fp16
    x[4, 0, 0, 0] = 70000.0  # beyond max_abs and overflows fp16
    y = np.arange(20, dtype=np.int64) % 10
    y[6] = 12
    np.savez(tmp_path / "d.npz", img=x, y=y)
    report = scan(tmp_path / "d.npz", write_schema(tmp_path, SCHEMA))
    got = rows(report)
    assert (2, "img", "extreme", "60") in got
    assert (4, "img", "extreme", "70000") in got and (4, "img", "fp16_safe", "70000") in got
    assert (6, "y", "out_of_range", "12") in got
    assert (None, "mask", "schema", "tensor missing") in got
    assert len(got) == 5
    sev = report.findings.set_index("check")["severity"]
    assert sev["extreme"].tolist() == ["error", "error"]


def test_dtype_and_shape_mismatch_whole_arrays(tmp_path: Path) -> None:
    torch.save(
        {
            "img": torch.zeros(5, 3, 8, 8, dtype=torch.float64),
            "y": torch.zeros(5),
            "mask": torch.ones(5),
        },
        tmp_path / "d.pt",
    )
    got = rows(scan(tmp_path / "d.pt", write_schema(tmp_path, SCHEMA)))
    assert got == {
        (
            None,
            "img",
            "schema",
            "dtype float64, schema says float32; shape [5, 3, 8, 8], schema says [*, 3, 4, 4]",
        ),
        (None, "y", "schema", "dtype float32, schema says int64"),
    }


def test_bf16_dtype_is_named_in_findings(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    save_file(
        {
            "img": torch.zeros(2, 3, 4, 4, dtype=torch.bfloat16),
            "y": torch.zeros(2, dtype=torch.int64),
            "mask": torch.ones(1),
        },
        str(tmp_path / "d.safetensors"),
    )
    got = rows(scan(tmp_path / "d.safetensors", write_schema(tmp_path, SCHEMA)))
    assert got == {(None, "img", "schema", "dtype bfloat16, schema says float32")}


def test_strict_flags_unexpected_keys(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", a=np.zeros(3), b=np.zeros(3))
    schema = write_schema(tmp_path, "tensors:\n  strict: true\n  keys:\n    a: {}\n")
    got = rows(scan(tmp_path / "d.npz", schema))
    assert got == {(None, "b", "schema", "unexpected tensor (schema is strict)")}


def test_bf16_fits_rule(tmp_path: Path) -> None:
    x = np.array([[1.0], [3.0e38], [3.39e38]], dtype=np.float32)  # bf16 max is 3.3895e38
    np.save(tmp_path / "x.npy", x)
    schema = write_schema(
        tmp_path, "tensors:\n  keys:\n    tensor: {fits: bf16, max_abs: 3.4e38}\n"
    )
    got = rows(scan(tmp_path / "x.npy", schema))
    assert {(r, c) for r, _, c, _ in got} == {(2, "bf16_safe")}


def _tar(path: Path, arrays: list[np.ndarray]) -> Path:
    with tarfile.open(path, "w") as tf:
        for i, a in enumerate(arrays):
            buf = io.BytesIO()
            np.save(buf, a)
            info = tarfile.TarInfo(f"k{i}.img.npy")
            info.size = len(buf.getvalue())
            tf.addfile(info, io.BytesIO(buf.getvalue()))
    return path


def test_tar_shapes_and_dtypes_checked_per_sample(tmp_path: Path) -> None:
    good = np.zeros((3, 4, 4), np.float32)
    arrays = [good, good, np.zeros((3, 5, 5), np.float32), good, good.astype(np.float64)]
    schema = write_schema(
        tmp_path, "tensors:\n  keys:\n    img.npy: {dtype: float32, shape: [*, 3, 4, 4]}\n"
    )
    got = rows(scan(_tar(tmp_path / "s.tar", arrays), schema))
    assert got == {
        (2, "img.npy", "schema", "shape [*, 3, 5, 5], schema says [*, 3, 4, 4]"),
        (4, "img.npy", "schema", "dtype float64, schema says float32"),
    }


def test_tar_missing_key_after_reading_the_shard(tmp_path: Path) -> None:
    schema = write_schema(tmp_path, "tensors:\n  keys:\n    img.npy: {}\n    cls: {}\n")
    got = rows(scan(_tar(tmp_path / "s.tar", [np.zeros(2)]), schema))
    assert got == {(None, "cls", "schema", "tensor missing")}


def test_tabular_files_ignore_the_tensor_section_and_vice_versa(tmp_path: Path) -> None:
    schema = write_schema(tmp_path, "tensors:\n  keys:\n    img: {}\n", with_columns=True)
    pq.write_table(pa.table({"v": [1.0, 20.0]}), tmp_path / "t.parquet")
    got = rows(scan(tmp_path / "t.parquet", schema))
    assert got == {(1, "v", "extreme", "20")}  # the pandera max_abs; no 'img missing'
    np.savez(tmp_path / "d.npz", img=np.zeros(2))
    assert rows(scan(tmp_path / "d.npz", schema)) == set()  # no 'column v missing'


def test_tensor_only_schema_via_cli(tmp_path: Path) -> None:
    import subprocess
    import sys

    np.save(tmp_path / "x.npy", np.full((4, 2), 5.0, np.float32))
    schema = write_schema(tmp_path, "tensors:\n  keys:\n    tensor: {range: [0, 1]}\n")
    cmd = [
        sys.executable,
        "-m",
        "datacheck",
        "scan",
        str(tmp_path / "x.npy"),
        "--schema",
        str(schema),
        "--out",
        str(tmp_path / "o"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    bad = write_schema(tmp_path, "tensors:\n  keys:\n    tensor: {rang: [0, 1]}\n")
    cmd[cmd.index("--schema") + 1] = str(bad)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "unknown rule 'rang' (did you mean 'range'?)" in proc.stderr


def test_a_columns_schema_on_tensor_files_only_is_refused_in_one_line(tmp_path: Path) -> None:
    """Its checks would run nowhere (tensor files take a tensors: section): a usage error,
    not a scan that passes without them; beside a table, the table takes them."""
    np.save(tmp_path / "x.npy", np.array([[1.0, 2.0], [3.0, 50.0]]))
    schema = tmp_path / "s.yaml"
    schema.write_text("columns:\n  a:\n    dtype: float64\n    checks:\n      le: 10\n")
    with pytest.raises(datacheck.UsageError, match=r"columns: \(a\) check tables.*x\.npy"):
        datacheck.scan(tmp_path / "x.npy", schema=str(schema), out=tmp_path / "o")
    pq.write_table(pa.table({"a": [1.0, 50.0]}), tmp_path / "t.parquet")
    report = datacheck.scan(tmp_path, schema=str(schema), out=tmp_path / "o2")
    assert {
        (Path(p).name, c)
        for p, c in zip(report.findings["path"], report.findings["check"], strict=True)
    } == {("t.parquet", "out_of_range")}
