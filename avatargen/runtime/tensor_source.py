"""Where a module's weights are read from: memory-mapped checkpoints, read one tensor (or one shard) at a time.

A checkpoint is never loaded whole. ``open_checkpoint`` maps the files and the placement pass reads each tensor as
it materialises it in its final home (the device, the rank's FSDP shard, pinned host memory), so host memory holds
at most one tensor beyond the placed weights; the file's pages stay in the page cache, which the kernel reclaims.

Layouts, for module ``name`` of a checkpoint ``path``:

- a folder holding ``<name>.safetensors``, ``<name>.safetensors.index.json`` (a sharded set: the index's
  ``weight_map`` names each tensor's file) or ``<name>.pth``: tensors under their own names;
- one ``.safetensors`` file, one ``*.index.json`` of a sharded set, or one ``.pth`` file: tensors of every module,
  each key prefixed ``<name>.``; a folder with exactly one ``*.index.json`` is that sharded set.

``.pth`` files are read only with ``torch.load(weights_only=True, mmap=True)``: a pickle that needs arbitrary Python
objects is refused (one line), never executed.
"""

from __future__ import annotations

import glob
import json
import os
import pickle
import zipfile
from pathlib import Path
from typing import Iterable, Protocol, TypeVar

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from avatargen.errors import CheckpointError, first_line

SAFETENSORS, INDEX, PTH = ".safetensors", ".index.json", ".pth"


class TensorSource(Protocol):
    """Named tensors that can be read one at a time, whole or a range of rows (an FSDP shard)."""

    label: str  # names the source in errors

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor's name and shape, without reading any data."""
        ...

    def read(self, name: str, rows: slice | None = None) -> Tensor:
        """Tensor ``name`` on the CPU (only ``rows`` of its first dimension when given), in its stored dtype."""
        ...


class StateDictSource:
    """Tensors already in memory (a model being trained, a test's perturbed weights)."""

    def __init__(self, tensors: dict[str, Tensor], label: str = "state dict"):
        self.tensors, self.label = tensors, label

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {k: tuple(v.shape) for k, v in self.tensors.items()}

    def read(self, name: str, rows: slice | None = None) -> Tensor:
        tensor = self.tensors[name].detach()
        return tensor[rows] if rows is not None else tensor


def _unreadable(file: Path, error: BaseException) -> CheckpointError:
    return CheckpointError(f"checkpoint file '{file}' could not be read ({first_line(error)}); re-create or re-copy it")


class SafetensorsSource:
    """Tensors of one or more memory-mapped safetensors files; ``keys`` maps a tensor's name to (file, stored key)."""

    def __init__(self, keys: dict[str, tuple[Path, str]], label: str):
        self.keys, self.label = keys, label
        self._files: dict[Path, object] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        for name, (file, key) in keys.items():
            self._shapes[name] = tuple(self._slice(file, key).get_shape())

    def _open(self, file: Path):
        if file not in self._files:
            try:
                self._files[file] = safe_open(str(file), framework="pt", device="cpu")
            except (SafetensorError, OSError, ValueError) as error:
                raise _unreadable(file, error) from error
        return self._files[file]

    def _slice(self, file: Path, key: str):
        try:
            return self._open(file).get_slice(key)
        except (SafetensorError, OSError, ValueError) as error:
            raise _unreadable(file, error) from error

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(self._shapes)

    def read(self, name: str, rows: slice | None = None) -> Tensor:
        file, key = self.keys[name]
        try:
            if rows is None:
                return self._open(file).get_tensor(key)
            return self._slice(file, key)[rows]  # reads only those rows' bytes from the mapping
        except (SafetensorError, OSError, ValueError) as error:
            raise _unreadable(file, error) from error


def _file_keys(file: Path) -> list[str]:
    try:
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            return list(handle.keys())
    except (SafetensorError, OSError, ValueError) as error:
        raise _unreadable(file, error) from error


def _index_keys(index: Path) -> dict[str, Path]:
    """A sharded set's ``weight_map``: stored key -> the file holding it (files named relative to the index)."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        keys = {str(k): index.parent / str(v) for k, v in weight_map.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise CheckpointError(f"checkpoint index '{index}' is not a safetensors index with a 'weight_map' "
                              f"({first_line(error)}); re-create it") from error  # fmt: skip
    missing = sorted({str(f.name) for f in keys.values() if not f.is_file()})
    if missing:
        raise CheckpointError(f"checkpoint index '{index}' names files that are not there ({', '.join(missing[:3])}); copy the whole set")
    return keys


def load_pth(file: Path) -> dict[str, Tensor]:
    """A ``.pth`` state dict, memory-mapped by ``torch.load(weights_only=True, mmap=True)``: no tensor data is read,
    no object beyond tensors is ever unpickled. ``CheckpointError`` (one line) for a pickle that needs Python objects,
    a legacy (non-zip) pickle, a file that cannot be read, one that is not a flat state dict, and one whose tensors
    reach past the bytes stored for them (a truncated or re-zipped file: they would read other tensors' bytes)."""
    try:
        size = os.stat(file).st_size
    except OSError as error:
        raise _unreadable(file, error) from None
    if size == 0:  # torch would call it a legacy pickle
        raise CheckpointError(f"checkpoint file '{file}' is empty (0 bytes): a download or copy that did not finish; "
                              "download or copy it again")  # fmt: skip
    try:
        loaded = torch.load(str(file), map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError:
        raise CheckpointError(
            f"checkpoint file '{file}' is not a weights-only .pth (it needs Python objects beyond tensors, which "
            "are never unpickled); save its state_dict() alone, or convert it to .safetensors"
        ) from None
    except RuntimeError as error:
        if "_use_new_zipfile_serialization" not in str(error):
            raise _unreadable(file, error) from None
        if not _is_legacy_pickle(file):  # torch's mmap says "legacy" of every file that is not a zip
            raise CheckpointError(f"checkpoint file '{file}' is not a torch checkpoint (neither a zip nor a pickle "
                                  "that torch.save writes): damaged, or not downloaded whole; download or copy it "
                                  "again") from None  # fmt: skip
        raise CheckpointError(f"checkpoint file '{file}' is a legacy (non-zip) torch pickle, which cannot be "
                              "memory-mapped; re-save it with torch.save() of torch 1.6 or newer, or convert it to "
                              ".safetensors") from None  # fmt: skip
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as error:
        raise _unreadable(file, error) from None
    if not isinstance(loaded, dict) or not all(isinstance(v, Tensor) for v in loaded.values()):
        raise CheckpointError(f"checkpoint file '{file}' does not hold a flat state dict of tensors; save model.state_dict()")
    short = _short_storages(file, loaded)
    if short:
        raise CheckpointError(f"checkpoint file '{file}' is truncated: tensor {short[0]} needs more bytes than the file "
                              f"stores for it ({len(short)} tensor(s) so); re-create or re-copy it")  # fmt: skip
    return loaded


LEGACY_MAGIC = b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")  # torch's legacy format: a pickled long


def _is_legacy_pickle(file: Path) -> bool:
    """Whether ``file`` starts as torch.save's legacy (non-zip) format does: a pickle (any protocol, framed or not)
    whose first object is torch's magic number."""
    try:
        with open(file, "rb") as handle:
            head = handle.read(32)
    except OSError:
        return False
    return head.startswith(b"\x80") and LEGACY_MAGIC in head


def _short_storages(file: Path, tensors: dict[str, Tensor]) -> list[str]:
    """Tensors whose storage, as the pickle declares it, is longer than the zip record holding its bytes.

    A memory-mapped storage is a slice of one mapping of the whole file at its record's offset, so its address minus
    the mapping's start is that offset (the first record's data is the lowest address)."""
    try:
        with zipfile.ZipFile(file) as archive, open(file, "rb") as raw:
            sizes: dict[int, int] = {}
            for info in archive.infolist():
                if "/data/" not in info.filename:
                    continue
                raw.seek(info.header_offset)
                header = raw.read(30)  # the local header: its name and extra field lengths end at byte 30
                start = info.header_offset + 30 + int.from_bytes(header[26:28], "little") + int.from_bytes(header[28:30], "little")
                sizes[start] = info.file_size
    except (OSError, zipfile.BadZipFile):
        return []
    storages = {name: t.untyped_storage() for name, t in tensors.items() if t.untyped_storage().nbytes()}
    if not sizes or not storages:
        return []
    base = min(s.data_ptr() for s in storages.values()) - min(sizes)
    return [name for name, s in storages.items() if sizes.get(s.data_ptr() - base, -1) < s.nbytes()]


class PthSource(StateDictSource):
    """A ``.pth`` state dict, memory-mapped (``load_pth``)."""

    def __init__(self, file: Path, prefix: str):
        loaded = load_pth(file)
        tensors = {k[len(prefix):]: v for k, v in loaded.items() if k.startswith(prefix)}
        super().__init__(tensors, str(file))


def _unprefixed(keys: dict[str, Path], prefix: str) -> dict[str, tuple[Path, str]]:
    return {k[len(prefix):]: (file, k) for k, file in keys.items() if k.startswith(prefix)}


def open_checkpoint(path: Path, name: str) -> TensorSource:
    """The tensors of module ``name`` in checkpoint ``path`` (layouts: module docstring), mapped, not read."""
    if path.is_dir():
        single, index, pth = path / f"{name}{SAFETENSORS}", path / f"{name}{SAFETENSORS}{INDEX}", path / f"{name}{PTH}"
        if single.is_file():
            return SafetensorsSource({k: (single, k) for k in _file_keys(single)}, str(single))
        if index.is_file():
            return SafetensorsSource(_unprefixed(_index_keys(index), ""), str(index))
        if pth.is_file():
            return PthSource(pth, "")
        indexes = sorted(path.glob(f"*{INDEX}"))
        if len(indexes) == 1:
            return _prefixed(_index_keys(indexes[0]), name, indexes[0])
        raise CheckpointError(
            f"checkpoint folder '{path}' has no '{name}.safetensors' (nor '{name}.safetensors.index.json', "
            f"'{name}.pth'); point model.checkpoint at a complete checkpoint"
        )
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{path}' does not exist; set model.checkpoint to a .safetensors file or folder, or model.weights=random")
    if path.name.endswith(INDEX):
        return _prefixed(_index_keys(path), name, path)
    if path.suffix in (PTH, ".pt"):
        source: TensorSource = PthSource(path, f"{name}.")
        if not source.shapes():
            raise CheckpointError(f"checkpoint '{path}' has no tensors for '{name}' (keys prefixed '{name}.')")
        return source
    return _prefixed({k: path for k in _file_keys(path)}, name, path)


def _prefixed(keys: dict[str, Path], name: str, path: Path) -> SafetensorsSource:
    tensors = _unprefixed(keys, f"{name}.")
    if not tensors:
        raise CheckpointError(f"checkpoint '{path}' has no tensors for '{name}' (keys prefixed '{name}.')")
    return SafetensorsSource(tensors, str(path))


# -- files as their users download them --------------------------------------------------------------------------


def files_of(root: Path, pattern: str, key: str) -> list[Path]:
    """The files ``pattern`` (a glob under ``root``) names; CheckpointError naming the config key if none."""
    paths = sorted(Path(p) for p in glob.glob(str(root / pattern)))
    if not paths:
        raise CheckpointError(
            f"{key}: no file matches '{root / pattern}'; download it (docs/models.md) or point {key} at it "
            f"(paths are relative to model.checkpoint={root})"
        )
    return paths


FileRef = TypeVar("FileRef")  # a Path, or a file as a report shows it


def stored_once(files: Iterable[tuple[FileRef, Iterable[str]]]) -> dict[str, FileRef]:
    """Each tensor name of several files merged by name -> the file holding it; ``CheckpointError`` (one line, the
    first name and both files, how many names so) when a name is stored in two files: they could disagree, and
    which one a load keeps would be an accident of order. Files as the caller names them (paths, or as shown)."""
    owners: dict[str, FileRef] = {}
    twice: list[tuple[str, FileRef, FileRef]] = []
    for file, names in files:
        for name in names:
            if name in owners:
                twice.append((name, owners[name], file))
            else:
                owners[name] = file
    if twice:
        name, first, second = twice[0]
        more = f" ({len(twice)} tensors are stored twice)" if len(twice) > 1 else ""
        raise CheckpointError(f"tensor '{name}' is in both '{first}' and '{second}'{more}; remove one of the files")
    return owners


def safetensors_files(paths: list[Path], label: str) -> SafetensorsSource:
    """Several safetensors files as one source; a name stored twice is refused (``stored_once``)."""
    owners = stored_once((path, _file_keys(path)) for path in paths)
    return SafetensorsSource({key: (path, key) for key, path in owners.items()}, label)


class RenamedSource:
    """Another source under other names: ``names`` maps each name this source offers to the base's name."""

    def __init__(self, base: TensorSource, names: dict[str, str]):
        self.base, self.names, self.label = base, names, base.label

    def shapes(self) -> dict[str, tuple[int, ...]]:
        shapes = self.base.shapes()
        return {name: shapes[stored] for name, stored in self.names.items()}

    def read(self, name: str, rows: slice | None = None) -> Tensor:
        return self.base.read(self.names[name], rows)


def pth_source(root: Path, relative: str, key: str, prefix: str = "") -> TensorSource:
    """One ``.pth`` pickle (memory-mapped, weights only), the tensors under ``prefix`` named without it."""
    path = root / relative
    if not path.is_file():
        raise CheckpointError(f"{key}: '{path}' does not exist; download it (docs/models.md) or point {key} at it")
    return PthSource(path, prefix)
