"""Dataset folders: Hugging Face save_to_disk splits and MosaicML MDS shards (written by
streaming's MDSWriter)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from _mediakit import mds_sample_span, write_hf_split, write_mds

import datacheck


def scan(path: Path) -> datacheck.Report:
    return datacheck.scan(str(path), executor="inprocess", workers=1)


def sites(report: datacheck.Report) -> set[tuple[str, int, str, str]]:
    f = report.findings
    return {
        (Path(r.path).name, int(r.row), r.column, r.check) for r in f[f["row"].notna()].itertuples()
    }


# --- Hugging Face save_to_disk ------------------------------------------------------------


def test_hf_dataset_dict_with_a_broken_image(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    write_hf_split(root / "train")
    write_hf_split(root / "test", files=1)
    (root / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    report = scan(root)
    files = {
        Path(f["path"]).parent.name + "/" + Path(f["path"]).name: f for f in report.data["files"]
    }
    assert sorted(files) == [
        "test/data-00000-of-00001.arrow",
        "train/data-00000-of-00002.arrow",
        "train/data-00001-of-00002.arrow",
    ]
    assert all(f["format"] == "hf" for f in files.values())
    assert files["train/data-00000-of-00002.arrow"]["columns"]["image"] == "Image"
    ignored = {Path(p).name for p in report.data["ignored"]}
    assert ignored == {"state.json", "dataset_info.json", "dataset_dict.json"}  # metadata
    assert sites(report) == {
        ("data-00001-of-00002.arrow", 3, "image", "corrupt"),
        ("data-00001-of-00002.arrow", 5, "image", "corrupt"),
        ("data-00001-of-00002.arrow", 7, "x", "nan"),
    }
    f = report.findings
    assert "not found" in f[f["row"] == 5]["value"].iloc[0]


def test_hf_flagged_rows_read_back_without_decoding(tmp_path: Path) -> None:
    """Rows come back as the stream holds them: a media column as its {bytes, path} struct."""
    report = scan(write_hf_split(tmp_path / "train"))
    rows = report.flagged_rows("data-00001-of-00002.arrow")
    assert list(rows.index) == [3, 5, 7]
    assert rows.loc[5, "image"] == {"bytes": None, "path": "missing.jpg"}
    assert rows.loc[3, "_checks"] == "image: corrupt" and np.isnan(rows.loc[7, "x"])


# --- MosaicML Streaming (MDS) ---------------------------------------------------------------


def test_mds_shard_checked(tmp_path: Path) -> None:
    report = scan(write_mds(tmp_path / "mds"))
    (entry,) = report.data["files"]
    assert entry["format"] == "mds" and entry["rows"] == 20
    assert entry["columns"] == {"image": "jpeg", "label": "int", "score": "float32"}
    assert sites(report) == {("shard.00000.mds", 11, "score", "nan")}


@pytest.mark.parametrize("where", ["sample", "offsets"])
def test_mds_flipped_byte_is_corrupt(where: str, tmp_path: Path) -> None:
    folder = write_mds(tmp_path / "mds")
    shard = folder / "shard.00000.mds"
    data = bytearray(shard.read_bytes())
    begin, _ = mds_sample_span(bytes(data), 0)
    data[begin + 4 + 300 if where == "sample" else 9] ^= 0x10  # in sample 0's JPEG / offsets
    shard.write_bytes(bytes(data))
    entry = scan(folder).data["files"][0]
    assert entry["status"] == "corrupt" and "sha1" in entry["error"]


def test_mds_without_hashes_finds_the_broken_sample(tmp_path: Path) -> None:
    folder = write_mds(tmp_path / "mds")
    index = json.loads((folder / "index.json").read_text())
    index["shards"][0]["raw_data"]["hashes"] = {}
    (folder / "index.json").write_text(json.dumps(index))
    shard = folder / "shard.00000.mds"
    data = bytearray(shard.read_bytes())
    offsets = np.frombuffer(bytes(data[4 : 4 + 4 * 21]), "<u4")
    data[int(offsets[6]) : int(offsets[6]) + 4] = np.uint32(10).tobytes()  # sample 6's size
    shard.write_bytes(bytes(data))
    report = scan(folder)
    assert ("shard.00000.mds", 6, None, "corrupt") in {
        (a, b, c if isinstance(c, str) else None, d) for a, b, c, d in sites(report)
    }


def test_hf_audio_column_decoded(tmp_path: Path) -> None:
    import soundfile as sf

    def wav(nan: bool) -> bytes:
        x = np.zeros((100, 1), np.float32)
        if nan:
            x[10, 0] = np.nan
        buf = io.BytesIO()
        sf.write(buf, x, 8000, format="WAV", subtype="FLOAT")
        return buf.getvalue()

    folder = tmp_path / "train"
    folder.mkdir()
    audio_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    features = {"audio": {"_type": "Audio", "sampling_rate": 8000}}
    schema = pa.schema([("audio", audio_type)])
    clips = [{"bytes": wav(i == 2), "path": None} for i in range(4)]
    clips[3] = {"bytes": b"RIFF junk", "path": None}
    data = folder / "data-00000-of-00001.arrow"
    with pa.OSFile(str(data), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
        w.write_table(pa.table([pa.array(clips, audio_type)], schema=schema))
    state = {"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}
    (folder / "state.json").write_text(json.dumps(state))
    (folder / "dataset_info.json").write_text(json.dumps({"features": features}))
    report = scan(folder)
    assert sites(report) == {
        ("data-00000-of-00001.arrow", 2, "audio", "nan"),
        ("data-00000-of-00001.arrow", 3, "audio", "corrupt"),
    }
