"""WebDataset shards as ``webdataset.TarWriter`` / ``ShardWriter`` write them (webdataset
1.0.2), read back by ``webdataset.WebDataset`` with its default decoders: the oracle.

A member that does not decode as its extension says (``.npy``, ``.pth``, ``.json``, ``.cls``,
an image) is a finding at its sample's row; a header that fails its checksum makes the shard
corrupt at that offset, and every finding around it is still made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ._kit import copy_of, entries, flip, scan, sites, truncate

wds = pytest.importorskip("webdataset")
torch = pytest.importorskip("torch")
N = 12


def sample(i: int, planted: bool = True) -> dict[str, Any]:
    """One sample of each member kind; planted: NaN in the npy at 3, Inf in the json at 5,
    NaN in the pth at 9."""
    from PIL import Image

    x = np.linspace(0, 1, 4, dtype=np.float32)
    if planted and i == 3:
        x[2] = np.nan
    t = torch.ones(3)
    if planted and i == 9:
        t[0] = float("nan")
    return {
        "__key__": f"s{i:04d}",
        "jpg": Image.new("RGB", (8, 8), (i * 10, 0, 0)),
        "npy": x,
        "cls": i % 3,
        "json": {"score": float("inf") if planted and i == 5 else 0.5, "n": i},
        "pth": t,
        "txt": f"caption {i}",
    }


PLANTED = {(3, "npy", "nan"), (5, "json.score", "inf"), (9, "pth", "nan")}


def write_shard(path: Path, samples: list[dict[str, Any]]) -> Path:
    with wds.TarWriter(str(path)) as sink:
        for s in samples:
            sink.write(s)
    return path


def write_shards(folder: Path, planted: bool = True) -> list[Path]:
    folder.mkdir(parents=True)
    with wds.ShardWriter(str(folder / "shard-%06d.tar"), maxcount=4, verbose=0) as sink:
        for i in range(N):
            sink.write(sample(i, planted))
    return sorted(folder.glob("*.tar"))


def wds_reads(paths: list[Path]) -> list[dict[str, Any]]:
    """Every sample as webdataset reads and decodes it (PIL images)."""
    ds = wds.WebDataset([str(p) for p in paths], shardshuffle=False).decode("pil")
    return list(ds)


def test_shards_written_by_shard_writer(tmp_path: Path) -> None:
    shards = write_shards(tmp_path / "wds")
    assert len(shards) == 3
    report = scan(tmp_path / "wds")
    files = entries(report)
    assert {e["status"] for e in files.values()} == {"flagged"}
    starts = {p.name: 4 * k for k, p in enumerate(shards)}
    assert {(starts[f] + r, c, k) for f, r, c, k in sites(report)} == PLANTED
    read = wds_reads(shards)
    assert len(read) == N and np.isnan(read[3]["npy"][2]) and read[5]["json"]["score"] == np.inf


def test_clean_shard_is_ok(tmp_path: Path) -> None:
    shard = write_shard(tmp_path / "a.tar", [sample(i, planted=False) for i in range(N)])
    (entry,) = scan(shard).data["files"]
    assert entry["status"] == "ok" and entry["rows"] == N, entry
    assert entry["columns"]["jpg"] == "image" and entry["columns"]["cls"] == "int64"
    assert len(wds_reads([shard])) == N


BAD = {
    "npy": b"\x93NUMPY broken",
    "pth": b"PK\x03\x04 not a torch file",
    "json": b'{"score": 0.5',
    "cls": b"seven",
    "jpg": b"\xff\xd8\xff\xe0 cut",
}
"""A member that does not decode, as the bytes TarWriter writes when handed bytes."""


@pytest.mark.parametrize("member", sorted(BAD))
def test_bad_member_is_corrupt_at_its_sample(member: str, tmp_path: Path) -> None:
    samples = [sample(i) for i in range(N)]
    samples[7][member] = BAD[member]
    shard = write_shard(tmp_path / "a.tar", samples)
    report = scan(shard)
    (entry,) = report.data["files"]
    assert entry["status"] == "flagged", entry  # the shard is read; the sample is named
    assert sites(report) == {("a.tar", r, c, k) for r, c, k in PLANTED | {(7, member, "corrupt")}}
    with pytest.raises(Exception):  # noqa: B017 - the oracle fails on that sample
        wds_reads([shard])


def test_truncated_shard_is_corrupt(tmp_path: Path) -> None:
    """Cut inside the last sample's data: corrupt, and the findings before the cut are kept."""
    shard = write_shard(tmp_path / "a.tar", [sample(i) for i in range(N)])
    truncate(shard, header_offsets(shard, data=True)["s0011.txt"] + 3)  # into its data
    report = scan(shard)
    (entry,) = report.data["files"]
    assert entry["status"] == "corrupt" and "past the end" in entry["error"], entry
    assert {(r, c, k) for _, r, c, k in sites(report) if r is not None} == PLANTED
    with pytest.raises(Exception):  # noqa: B017 - tarfile: unexpected end of data
        wds_reads([shard])


def test_end_marker_cut_short_is_a_warning(tmp_path: Path) -> None:
    """Cut in the zeros after the last member (tarfile pads to 10 KiB): every member is there
    and webdataset reads them all, so not corrupt: a warning that the marker is cut."""
    shard = write_shard(tmp_path / "a.tar", [sample(i, planted=False) for i in range(N)])
    truncate(shard, -2000)
    report = scan(shard)
    (entry,) = report.data["files"]
    assert entry["status"] == "flagged" and entry["counts"] == {"corrupt": 1}, entry
    assert report.findings["severity"].tolist() == ["warning"]
    assert len(wds_reads([shard])) == N


def header_offsets(shard: Path, data: bool = False) -> dict[str, int]:
    """Where each member's headers start (TarWriter writes a pax header before each, for the
    fractional mtime), or its data."""
    import tarfile

    with tarfile.open(shard) as tf:
        return {m.name: m.offset_data if data else m.offset for m in tf.getmembers()}


@pytest.mark.parametrize("victim", ["s0006.npy", "s0006.jpg", "s0010.txt"])
def test_flipped_header_byte_keeps_the_other_findings(victim: str, tmp_path: Path) -> None:
    """A byte of one member's header name: its checksum fails.  The shard is corrupt at that
    offset; the samples before and after it are still read and their findings made.
    webdataset's own reader stops there without an error, the rest of the shard unread."""
    shard = write_shard(tmp_path / "a.tar", [sample(i) for i in range(N)])
    at = header_offsets(shard)[victim]
    flip(copy_of(shard, tmp_path / "b.tar"), at + 2, 0x01)
    report = scan(tmp_path / "b.tar")
    (entry,) = report.data["files"]
    assert entry["status"] == "corrupt", entry
    assert f"the tar header at byte {at} fails its checksum" in entry["error"], entry["error"]
    assert {(r, c, k) for _, r, c, k in sites(report) if r is not None} == PLANTED
    assert entry["rows"] == N
    assert len(wds_reads([tmp_path / "b.tar"])) < N  # the oracle silently reads less


def test_flipped_header_of_the_last_member(tmp_path: Path) -> None:
    """Nothing valid after the damaged header: the members from there on are lost, named."""
    shard = write_shard(tmp_path / "a.tar", [sample(i) for i in range(N)])
    at = header_offsets(shard)["s0011.txt"]
    flip(shard, at + 2, 0x01)
    (entry,) = scan(shard).data["files"]
    assert entry["status"] == "corrupt" and f"byte {at}" in entry["error"], entry


def test_concatenated_archives_are_read_whole(tmp_path: Path) -> None:
    """``cat a.tar b.tar``: the second archive follows the first one's end-of-archive marker.
    webdataset stops at the marker; datacheck reads both and says so (a warning), it is not
    damage."""
    a = write_shard(tmp_path / "a.tar", [sample(i) for i in range(6)])
    b = write_shard(tmp_path / "b.tar", [sample(i) for i in range(6, N)])
    both = tmp_path / "ab.tar"
    both.write_bytes(a.read_bytes() + b.read_bytes())
    report = scan(both)
    (entry,) = report.data["files"]
    assert entry["status"] == "flagged" and entry["rows"] == N, entry
    found = {(r, c, k) for _, r, c, k in sites(report)}
    assert found == PLANTED | {(None, None, "corrupt")}
    assert len(wds_reads([both])) == 6


def more_kinds(i: int, planted: bool) -> dict[str, Any]:
    """The other member kinds webdataset's default decoders read: MessagePack, ``.npz``,
    webdataset's own ``.ten`` tensors (TarWriter encodes each from the Python value); planted:
    NaN in the msgpack at 1, Inf in an npz array at 2, NaN in the second tensor at 4."""
    bad = lambda at, v: v if planted and i == at else 0.5  # noqa: E731
    return {
        "__key__": f"k{i:03d}",
        "mp": {"loss": bad(1, float("nan")), "tag": "x"},
        "npz": {"a": np.full((2, 2), bad(2, np.inf), np.float32), "n": np.arange(3)},
        "ten": [np.zeros(3, np.int32), np.full(4, bad(4, np.nan), np.float32)],
    }


def test_msgpack_npz_and_tenbin_members_are_decoded_as_webdataset_does(tmp_path: Path) -> None:
    shard = write_shard(tmp_path / "a.tar", [more_kinds(i, planted=True) for i in range(6)])
    report = scan(shard)
    assert {(r, c, k) for _, r, c, k in sites(report)} == {
        (1, "mp.loss", "nan"),
        (2, "npz.a", "inf"),
        (4, "ten.1", "nan"),
    }
    read = wds_reads([shard])  # the oracle decodes the same values
    assert np.isnan(read[1]["mp"]["loss"]) and np.isinf(read[2]["npz"]["a"]).all()
    assert np.isnan(read[4]["ten"][1]).all() and read[0]["npz"]["n"].tolist() == [0, 1, 2]
    clean = write_shard(tmp_path / "b.tar", [more_kinds(i, planted=False) for i in range(6)])
    (entry,) = scan(clean).data["files"]
    assert entry["status"] == "ok", entry
    assert entry["columns"]["mp"] == "msgpack" and entry["columns"]["ten.1"] == "float32"


@pytest.mark.parametrize("member", ["mp", "npz", "ten"])
def test_a_member_of_those_kinds_that_does_not_decode_is_corrupt_at_its_sample(
    member: str, tmp_path: Path
) -> None:
    samples = [more_kinds(i, planted=False) for i in range(6)]
    import tarfile

    good = write_shard(tmp_path / "good.tar", samples[3:4])
    with tarfile.open(good) as tf:
        fp = tf.extractfile(f"k003.{member}")
        raw = fp.read() if fp is not None else b""
    cut = {"mp": len(raw) - 3, "npz": len(raw) - 5, "ten": len(raw) // 2 + 12}[member]
    samples[3][member] = raw[:cut]  # the bytes TarWriter wrote, cut inside a value
    shard = write_shard(tmp_path / "a.tar", samples)
    assert sites(scan(shard)) == {("a.tar", 3, member, "corrupt")}
    with pytest.raises(Exception):  # noqa: B017 - the oracle fails on that sample
        wds_reads([shard])
