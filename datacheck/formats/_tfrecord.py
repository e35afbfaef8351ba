"""TFRecord files (``.tfrecord``/``.tfrecords``, plain or GZIP), read without TensorFlow.

Every record is framed as ``uint64 length, uint32 masked CRC32C(length), data, uint32 masked
CRC32C(data)``, and both checksums are verified.  A bad length checksum (or a length past the
end of the file) loses the framing: the file is ``corrupt`` from there.  A bad data checksum
damages one record: a ``corrupt`` finding at its row (the record's ordinal), and the rest of the
file is still read.  Records that parse as ``tf.train.Example`` (a few lines of protobuf wire
format, parsed here) have their float features checked for NaN/Inf and their image bytes
(JPEG/PNG/...) fully decoded, findings at the record's row, column = the feature name.

The framing, the checksums and the protobuf wire format are read by :mod:`datacheck._tfrecord`
(shared with ``datacheck logs``, which reads TensorBoard event files: TFRecord files too).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator, Mapping
from typing import IO, Any

import numpy as np

from datacheck._tfrecord import FramingError, fields, read_body, read_header
from datacheck.checks._registry import Severity
from datacheck.findings import Finding
from datacheck.formats import Format, Opened, WorkUnit, memory_budget, mib, register
from datacheck.formats._image import DecodeError, check_image
from datacheck.formats._tensor_common import SampleChunk, TensorFileError
from datacheck.schema._media import ImageRules, media_rules

__all__ = ["TfRecordFormat", "parse_example"]

RECORDS_PER_CHUNK = 1024
_IMAGE_MAGIC = (
    *(b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF8", b"RIFF", b"BM", b"II*\x00", b"MM\x00*"),
)
"""Bytes features that start like an image (JPEG, PNG, GIF, WebP, BMP, TIFF) are decoded."""


def _floats(feature: bytes) -> np.ndarray:
    # packed (wire type 2) or one float per field (wire type 5): little-endian float32 either way
    parts = [np.frombuffer(v, "<f4") for n, w, v in fields(feature) if n == 1 and w in (2, 5)]
    return np.concatenate(parts) if parts else np.empty(0, np.float32)


def parse_example(record: bytes) -> dict[str, tuple[str, Any]] | None:
    """A ``tf.train.Example``'s features: name -> ("float", array) | ("bytes", [values]).

    None when the record is not an Example (other protos are framed and checksummed only).
    """
    try:
        out: dict[str, tuple[str, Any]] = {}
        for num, wire, features in fields(record):
            if num != 1 or wire != 2:
                return None
            for fnum, fwire, entry in fields(features):
                if fnum != 1 or fwire != 2:
                    return None
                parts = {n: v for n, w, v in fields(entry) if w == 2}
                name, feature = parts.get(1, b"").decode("utf-8"), parts.get(2, b"")
                for kind, body in ((n, v) for n, w, v in fields(feature) if w == 2):
                    if kind == 2:
                        out[name] = ("float", _floats(body))
                    elif kind == 1:
                        out[name] = ("bytes", [v for n, w, v in fields(body) if n == 1])
        return out
    except (ValueError, UnicodeDecodeError):
        return None


def _example_findings(path: str, row: int, record: bytes, rules: ImageRules) -> list[Finding]:
    out: list[Finding] = []
    for name, (kind, value) in (parse_example(record) or {}).items():
        if kind == "float":
            for check, bad in (("nan", np.isnan(value)), ("inf", np.isinf(value))):
                if n := int(bad.sum()):
                    first = str(value[bad][0]) if check == "inf" else "nan"
                    out.append(Finding(path, check, Severity.ERROR, first, name, row, n))
            continue
        for data in value:
            if not data.startswith(_IMAGE_MAGIC):
                continue
            try:
                problems = check_image(data, rules)
            except DecodeError as exc:
                out.append(Finding(path, "corrupt", Severity.ERROR, str(exc), name, row))
                continue
            out += [Finding(path, p.check, p.severity, p.message, name, row) for p in problems]
    return out


def _records(
    fh: IO[bytes], path: str, rules: ImageRules, size: int | None, budget: float
) -> Iterator[SampleChunk]:
    """Records ``RECORDS_PER_CHUNK`` at a time; ``size``: the file's (None when compressed);
    ``budget``: the largest record read (:func:`datacheck.formats.memory_budget`)."""
    row, pos, start = 0, 0, 0
    found: list[Finding] = []
    while True:
        try:
            length = read_header(fh, row, pos, size)
            if length is None:
                break
            if length > budget:  # read whole to be checked: refused before allocating
                raise TensorFileError(
                    f"record {row}: {length} bytes, over the {mib(budget)} a unit may decode "
                    "at once (raise --unit-memory-mb to read it)"
                )
            data, intact = read_body(fh, length, row, pos)
        except FramingError as exc:
            raise TensorFileError(str(exc)) from None
        if not intact:
            msg = "data checksum mismatch: the record is damaged"
            found.append(Finding(path, "corrupt", Severity.ERROR, msg, "record", row))
        else:
            found += _example_findings(path, row, data, rules)
        row, pos = row + 1, pos + 16 + length
        if row - start >= RECORDS_PER_CHUNK:
            yield SampleChunk(row_offset=start, tensors={}, samples=row - start, findings=found)
            start, found = row, []
    yield SampleChunk(row_offset=start, tensors={}, samples=row - start, findings=found)


class TfRecordFormat(Format):
    name = "tfrecord"
    extensions = (".tfrecord", ".tfrecords")
    tabular = False

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        with open(unit.path, "rb") as probe:
            gz = probe.read(2) == b"\x1f\x8b"
            size = None if gz else probe.seek(0, 2)
        fh: Any = gzip.open(unit.path, "rb") if gz else open(unit.path, "rb")  # noqa: SIM115
        rules = media_rules(options).images

        def chunks() -> Iterator[SampleChunk]:
            try:
                yield from _records(fh, unit.path, rules, size, memory_budget(options))
            except (OSError, EOFError) as exc:  # gzip: a stream cut short or damaged
                raise TensorFileError(f"compressed stream: {exc}") from None
            finally:
                fh.close()

        return Opened({"record": "bytes"}, chunks())


register(TfRecordFormat())
