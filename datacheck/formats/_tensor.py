"""Tensor formats: ``.npy``/``.npz``, ``.pt``/``.pth``, ``.safetensors``, HDF5, WebDataset tar.

Every reader here treats its file as hostile: nothing is unpickled (``allow_pickle=False``,
``torch.load(weights_only=True)``), sizes and offsets claimed by headers are checked against the
bytes that exist before anything is allocated, nothing is extracted to disk, and arrays are read
a few MiB of samples at a time.  The sample index is axis 0 (for tar shards, the sample's
ordinal); the manifest ``column`` is the tensor key.  Heavy libraries (torch, h5py) are imported
only when a file of theirs is read.

The readers live in ``_tensor_numpy`` (npy, npz), ``_tensor_torch`` (pt), ``_tensor_files``
(safetensors), ``_tensor_hdf5`` (HDF5) and ``_tensor_tar`` (WebDataset shards); shared limits and chunking in
``_tensor_common``.
"""

from __future__ import annotations

from datacheck.formats import register
from datacheck.formats._tensor_common import PICKLE_MSG, TensorFileError
from datacheck.formats._tensor_files import SafetensorsFormat
from datacheck.formats._tensor_hdf5 import Hdf5Format
from datacheck.formats._tensor_numpy import SINGLE_KEY, NpyFormat, NpzFormat
from datacheck.formats._tensor_tar import TarFormat
from datacheck.formats._tensor_torch import PtFormat

__all__ = ["PICKLE_MSG", "SINGLE_KEY", "TENSOR_FORMATS", "TensorFileError"]

TENSOR_FORMATS = ("npy", "npz", "pt", "safetensors", "hdf5", "tar")

for _fmt in (NpyFormat(), NpzFormat(), PtFormat(), SafetensorsFormat(), Hdf5Format(), TarFormat()):
    register(_fmt)
