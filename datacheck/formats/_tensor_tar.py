"""WebDataset-style ``.tar`` shards: members grouped into samples by key, checked in place.

Written against the shards ``webdataset.TarWriter``/``ShardWriter`` write (webdataset 1.0.2;
``webdataset.WebDataset`` with its default decoders is the oracle in the tests).  A member
``dir/000123.input.npy`` belongs to sample ``dir/000123`` (consecutive members with the same key
form one sample) under the key ``input.npy`` (the manifest ``column``); the manifest ``row`` is
the sample's ordinal in the shard.  Decoded members: ``.npy`` (memory-mapped in an uncompressed
shard), ``.pt``/``.pth`` (``weights_only``), ``.json``/``.jsn`` (numbers, lists of numbers, and
the numeric fields of an object as ``<ext>.<field>``), MessagePack (``.mp``, ``.msg``: as JSON),
``.npz`` archives and webdataset's ``.ten`` tensors (``_tar_members``), the integers webdataset decodes (``.cls``,
``.cls2``, ``.index``, ``.inx``, ``.id``), other numeric text (``.label``, ``.target``, ...),
text (``.txt``, ``.text``, ``.transcript``: UTF-8).  Image members (``.jpg``, ``.png``, ...) are
fully decoded and audio members (``.wav``, ``.flac``, ...) decoded, under the schema's
``images:`` rules.  A member that does not decode as its extension says is a ``corrupt`` finding
at the sample's row (column: the member key), and the rest of the shard is still checked.
Other members (captions) are listed and checked for readability only; ``.pyd``/``.pickle``
members are never unpickled, and like a member past the memory budget they fail the shard.

Nothing is extracted to disk and member names are never used as paths; links are not followed.
A member whose header claims bytes past the end of the file stops the read (``corrupt``).  A
header that fails its checksum (a damaged byte) is skipped as tar readers that resynchronise
skip it, a block at a time to the next valid header: the shard is ``corrupt`` with the offset
and the samples around it named, and every member before and after it is still checked (the
member whose header it was is lost: webdataset's own reader stops there without an error).
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from datacheck.checks._registry import Severity
from datacheck.findings import Finding
from datacheck.formats import Chunk, Format, Opened, WorkUnit, memory_budget, mib
from datacheck.formats._audio import AUDIO_EXTS, check_audio
from datacheck.formats._image import IMAGE_EXTS, MAX_IMAGE_BYTES, DecodeError, check_image
from datacheck.formats._tar_members import (
    MSGPACK,
    NPZ,
    TENBIN,
    msgpack_document,
    npz_arrays,
    tenbin_arrays,
)
from datacheck.formats._tensor_common import (
    MAX_MEMBER_BYTES,
    MAX_NPY_HEADER,
    MAX_TEXT_BYTES,
    MappedFile,
    Refused,
    SampleBatcher,
    SampleChunk,
    TensorFileError,
    npy_data_bytes,
    pickle_error,
    read_npy_header,
    split_member,
)
from datacheck.schema._media import MediaSchema, media_rules

INTEGERS = frozenset({"cls", "cls2", "index", "inx", "id"})
"""Members webdataset's default decoders read with ``int(data)``: one that is not an integer
fails there."""
NUMERIC_TEXT = frozenset({"idx", "label", "labels", "target", "value", "score"})
"""Other text member extensions parsed as numbers (whitespace/comma separated) where they are
numbers (a label may be a word)."""
TEXT = frozenset({"txt", "text", "transcript"})
"""Members webdataset decodes as UTF-8."""
PICKLE_EXTS = frozenset({"pyd", "pickle", "pkl"})
_COMPRESSED = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ")
_RELEASE_EVERY = 64 << 20
_READ_BLOCK = 8 << 20


def _as_numeric(value: Any) -> np.ndarray | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        value = [value]
        single = True
    elif isinstance(value, list):
        single = False
    else:
        return None
    try:
        arr = np.asarray(value)
    except (ValueError, OverflowError):  # ragged or out of int64
        return None
    if arr.dtype.kind not in "iuf":
        return None
    return arr[0] if single else arr


def _integer(data: bytes) -> np.ndarray:
    """What webdataset's ``int(data)`` reads (surrounding whitespace allowed)."""
    try:
        return np.asarray([int(data)], dtype=np.int64)
    except (ValueError, OverflowError):
        text = bytes(data[:40]).decode("utf-8", "replace")
        raise TensorFileError(
            f"{text!r} is not an integer (webdataset reads it with int())"
        ) from None


def _numeric_text(data: bytes) -> np.ndarray | None:
    try:
        tokens = [t for t in re.split(r"[\s,]+", data.decode("utf-8").strip()) if t]
    except UnicodeDecodeError:
        return None
    if not tokens:
        return None
    try:
        return np.asarray([int(t) for t in tokens], dtype=np.int64)
    except (ValueError, OverflowError):
        pass
    try:
        return np.asarray([float(t) for t in tokens], dtype=np.float64)
    except ValueError:
        return None


class _Shard:
    """One pass over a shard's members, yielding stacked sample chunks."""

    def __init__(
        self,
        tf: tarfile.TarFile,
        mf: MappedFile | None,
        columns: dict[str, str],
        path: str = "",
        media: MediaSchema | None = None,
        budget: float = float("inf"),
    ) -> None:
        self.tf, self.mf, self.columns = tf, mf, columns
        self.budget = budget
        """Bytes a decoded member may take (:func:`datacheck.formats.memory_budget`)."""
        self.path, self.media = path, media or MediaSchema()
        self.problems: list[str] = []
        self.found: list[Finding] = []
        """Findings of decoded media members (absolute rows), handed out with the next chunk."""
        self.ordinal = -1
        self.released = 0
        self.next_header = 0
        """Where the header after the last member read starts (its data rounded to blocks)."""
        self.last: tuple[int, str | None] = (-1, None)
        """The last sample read: (ordinal, key)."""

    def chunks(self) -> Iterator[Chunk]:
        """The samples' chunks, then the shard's own failure (if any): every finding made
        before it is handed out first."""
        try:
            for chunk in self._chunks():
                chunk.findings, self.found = self.found, []
                yield chunk
            if self.found:
                yield SampleChunk(row_offset=self.ordinal + 1, tensors={}, findings=self.found)
            if self.problems:
                more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
                raise TensorFileError(f"{self.problems[0]}{more}")
        finally:
            self.tf.close()

    def _chunks(self) -> Iterator[Chunk]:
        batcher = SampleBatcher()
        ordinal, key, sample = -1, None, {}
        while (m := self._next()) is not None:
            parts = split_member(m.name) if m.isfile() else None
            if parts is None:
                continue
            if (past := self._past_the_end(m)) is not None:
                self.problems.append(past)  # the read stops here; what came before is kept
                break
            if parts[0] != key:
                if key is not None:
                    yield from batcher.add(ordinal, sample)
                    self._release(m.offset)
                ordinal, key, sample = ordinal + 1, parts[0], {}
            self.ordinal, self.last = ordinal, (ordinal, key)
            try:
                sample.update(self._decode(m, parts[1]))
            except Refused as exc:  # safety, not damage: the shard is not read as clean
                self.problems.append(f"sample {ordinal} ({key!r}), member {m.name!r}: {exc}")
            except Exception as exc:  # noqa: BLE001 - one bad member; the rest is still checked
                msg = f"member {m.name!r}: {exc}"[:300]
                self.found.append(
                    Finding(self.path, "corrupt", Severity.ERROR, msg, parts[1], ordinal)
                )
        if key is not None:
            yield from batcher.add(ordinal, sample)
        yield from batcher.finish(ordinal + 1)
        self._check_end()

    def _next(self) -> tarfile.TarInfo | None:
        """The next member; a gap before it is a header that failed its checksum, skipped
        (``ignore_zeros``: tarfile then resynchronises a block at a time)."""
        try:
            m = self.tf.next()
        except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:  # a stream cut or damaged
            self.problems.append(f"the tar stream breaks after byte {self.next_header}: {exc}")
            return None
        self.tf.members.clear()  # keep memory flat over shards with many members
        if m is not None:
            if m.offset != self.next_header:
                self._skipped(m)
            self.next_header = m.offset_data + -(-m.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
        return m

    def _skipped(self, m: tarfile.TarInfo) -> None:
        gap = m.offset - self.next_header
        if self.mf is not None and gap > 0 and not any(self.mf.bytes(self.next_header, gap)):
            self.found.append(  # not damage: archives concatenated (`cat a.tar b.tar`)
                Finding(
                    self.path,
                    "corrupt",
                    Severity.WARNING,
                    f"a second archive after the "
                    f"end-of-archive marker at byte {self.next_header}, read too (webdataset "
                    "and tar stop at the marker)",
                )
            )
            return
        ordinal, key = self.last
        before = (
            f"after sample {ordinal} ({key!r})" if key is not None else "before the first sample"
        )
        self.problems.append(
            f"the tar header at byte {self.next_header} fails its checksum (a damaged byte): "
            f"{m.offset - self.next_header} bytes skipped {before} to the next valid header, "
            f"{m.name!r} at byte {m.offset}; the member there is lost, the rest is read"
        )

    def _check_end(self) -> None:
        """tarfile ends quietly at a header cut short or damaged: the end-of-archive block must
        follow the last member."""
        if self.mf is None or self.problems:
            return  # compressed: the decompressor reports a stream cut short
        end = self.next_header
        rest = (
            self.mf.bytes(end, min(self.mf.size - end, tarfile.BLOCKSIZE))
            if end < self.mf.size
            else b""
        )
        if rest and len(rest) < tarfile.BLOCKSIZE and not any(rest):  # the marker cut short
            self.found.append(
                Finding(
                    self.path,
                    "corrupt",
                    Severity.WARNING,
                    f"the end-of-archive marker at byte "
                    f"{end} is cut short ({len(rest)} of 1024 bytes): every member before it "
                    "was read",
                )
            )
        elif len(rest) < tarfile.BLOCKSIZE:
            self.problems.append(
                f"truncated: the shard ends at byte {self.mf.size} inside a member header "
                f"(offset {end}), without the end-of-archive block; samples after it are lost"
            )
        elif any(rest):
            self.problems.append(
                f"the tar header at byte {end} fails its checksum (a damaged byte), and no valid "
                "header follows it: the members from there to the end are lost"
            )

    def _past_the_end(self, m: tarfile.TarInfo) -> str | None:
        if self.mf is not None and m.offset_data + m.size > self.mf.size:
            return (
                f"member {m.name!r} claims {m.size} bytes at offset {m.offset_data}, past the end "
                f"of the {self.mf.size}-byte file: truncated, or a lying header"
            )
        return None

    def _release(self, offset: int) -> None:
        if self.mf is not None and offset - self.released >= _RELEASE_EVERY:
            self.mf.release(self.released, offset)
            self.released = offset

    def _decode(self, m: tarfile.TarInfo, ext: str) -> dict[str, np.ndarray]:
        last = ext.rsplit(".", 1)[-1].lower()
        if last in PICKLE_EXTS:
            self.columns.setdefault(ext, "pickle")
            raise pickle_error(f"a .{last} member")
        if m.issparse():
            self.columns.setdefault(ext, "bytes")
            return {}
        if last == "npy":
            return self._found(ext, self._npy(m))
        if last in ("pt", "pth"):
            from datacheck.formats._tensor_torch import load_pt, sample_arrays

            obj = load_pt(self._bytes(m, MAX_MEMBER_BYTES))
            return sample_arrays(obj, self.columns, ext, self.budget)
        if last in ("json", "jsn"):
            return self._json(ext, self._bytes(m, MAX_TEXT_BYTES))
        if last in MSGPACK:
            return self._document(ext, msgpack_document(self._bytes(m, MAX_TEXT_BYTES)), "msgpack")
        if last in NPZ:
            arrays = npz_arrays(self._bytes(m, MAX_MEMBER_BYTES), self.budget)
            self.columns.setdefault(ext, "npz")
            return self._leaves(ext, arrays.items())
        if last in TENBIN:
            self.columns.setdefault(ext, "tenbin")
            arrays = tenbin_arrays(self._bytes(m, MAX_MEMBER_BYTES))
            return self._leaves(ext, ((str(i), a) for i, a in enumerate(arrays)))
        if last in INTEGERS:
            return self._found(ext, _integer(self._bytes(m, MAX_TEXT_BYTES)))
        if last in NUMERIC_TEXT:
            return self._found(ext, _numeric_text(self._bytes(m, MAX_TEXT_BYTES)), "text")
        if last in TEXT:
            self.columns.setdefault(ext, "text")
            _utf8(self._bytes(m, MAX_TEXT_BYTES))
            return {}
        if f".{last}" in IMAGE_EXTS or f".{last}" in AUDIO_EXTS:
            self._media(m, ext, f".{last}" in IMAGE_EXTS)
            return {}
        self.columns.setdefault(ext, "bytes")
        self._readable(m)
        return {}

    def _media(self, m: tarfile.TarInfo, ext: str, image: bool) -> None:
        """Decode an image/audio member; what it breaks is a finding at the sample's row."""
        self.columns.setdefault(ext, "image" if image else "audio")
        data = self._bytes(m, MAX_IMAGE_BYTES)
        try:
            problems = check_image(data, self.media.images) if image else check_audio(data)
        except DecodeError as exc:
            err = Severity.ERROR
            self.found.append(Finding(self.path, "corrupt", err, str(exc), ext, self.ordinal))
            return
        for p in problems:
            self.found.append(Finding(self.path, p.check, p.severity, p.message, ext, self.ordinal))

    def _found(self, col: str, arr: np.ndarray | None, other: str = "") -> dict[str, np.ndarray]:
        if arr is None:
            self.columns.setdefault(col, other)
            return {}
        self.columns.setdefault(col, arr.dtype.name)
        return {col: arr}

    def _fits(self, m: tarfile.TarInfo) -> None:
        """Refuse a member whose declared size is past the unit's budget, before reading it."""
        if m.size > self.budget:
            raise Refused(
                f"{m.size} bytes declared, over the {mib(self.budget)} a unit may decode at "
                "once (raise --unit-memory-mb to read it)"
            )

    def _bytes(self, m: tarfile.TarInfo, cap: int) -> bytes | bytearray:
        self._fits(m)
        if m.size > cap:
            raise TensorFileError(
                f"{m.size} bytes, above the {cap}-byte limit for this member type"
            )
        if self.mf is not None:
            return self.mf.bytes(m.offset_data, m.size)
        fp = self.tf.extractfile(m)
        data = bytearray(m.size)  # read in place, a block at a time: read(n) held it twice
        view, got = memoryview(data), 0
        while fp is not None and got < m.size:
            k = fp.readinto(view[got : got + _READ_BLOCK])
            if not k:
                break
            got += k
        if got != m.size:
            raise TensorFileError(f"truncated: {got} of {m.size} bytes")
        return data

    def _readable(self, m: tarfile.TarInfo) -> None:
        if self.mf is not None:
            return  # bounds already checked: the bytes are there
        fp = self.tf.extractfile(m)
        got = 0
        while fp is not None and (block := fp.read(1 << 20)):
            got += len(block)
        if got != m.size:
            raise TensorFileError(f"truncated: {got} of {m.size} bytes")

    def _npy(self, m: tarfile.TarInfo) -> np.ndarray:
        self._fits(m)  # mapped or not, its samples are stacked into a chunk: a copy
        if self.mf is None:
            data, base = self._bytes(m, MAX_MEMBER_BYTES), 0
        else:
            data, base = (
                self.mf.bytes(m.offset_data, min(m.size, MAX_NPY_HEADER + 64)),
                m.offset_data,
            )
        bio = io.BytesIO(bytes(data[: MAX_NPY_HEADER + 64]))  # the header only: no copy
        shape, fortran, dtype = read_npy_header(bio)
        header, need = bio.tell(), npy_data_bytes(shape, dtype)
        if need < 0 or header + need > m.size:
            raise TensorFileError(
                f"header says shape {shape} {dtype} ({need} bytes), the member holds {m.size - header}"
            )
        dims = shape[::-1] if fortran else shape
        if self.mf is not None:
            arr = self.mf.array(base + header, dtype, dims)
        else:
            arr = np.frombuffer(data, dtype, int(np.prod(dims, dtype=np.int64)), header).reshape(
                dims
            )
        return arr.T if fortran else arr

    def _json(self, ext: str, data: bytes) -> dict[str, np.ndarray]:
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise TensorFileError(f"invalid JSON: {exc}") from exc
        return self._document(ext, doc, "json")

    def _document(self, ext: str, doc: Any, kind: str) -> dict[str, np.ndarray]:
        """A decoded document's numbers: the whole of it, or its top-level fields."""
        if not isinstance(doc, dict):
            return self._found(ext, _as_numeric(doc), kind)
        self.columns.setdefault(ext, kind)
        out: dict[str, np.ndarray] = {}
        for field, value in doc.items():
            out.update(self._found(f"{ext}.{field}", _as_numeric(value), kind))
        return out

    def _leaves(self, ext: str, arrays: Any) -> dict[str, np.ndarray]:
        """The numeric arrays of an archive member, as ``<ext>.<name>``."""
        out: dict[str, np.ndarray] = {}
        for name, arr in arrays:
            if arr.dtype.kind in "iufcb":
                out.update(self._found(f"{ext}.{name}", arr))
        return out


def _utf8(data: bytes | bytearray) -> None:
    try:
        bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TensorFileError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None


class TarFormat(Format):
    name = "tar"
    work_per_byte = 5.0  # members decoded: images, arrays
    extensions = (".tar", ".tgz")
    tabular = False

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        with open(unit.path, "rb") as fh:
            compressed = fh.read(6).startswith(_COMPRESSED)
        # ignore_zeros: past a damaged header tarfile looks for the next valid one, block by
        # block, instead of ending the archive there quietly
        tf = tarfile.open(unit.path, "r:*", ignore_zeros=True)  # noqa: SIM115 - closed with its chunks
        mf = None if compressed else MappedFile(unit.path)
        columns: dict[str, str] = {}
        budget = memory_budget(options)
        shard = _Shard(tf, mf, columns, unit.path, media_rules(options), budget)
        return Opened(columns, shard.chunks())
