"""TensorBoard event files (`torch.utils.tensorboard`, tensorboardX, TensorFlow) → `SourceRun`s.

A run is a directory that holds event files (`*tfevents*`), all of them read in name order (a
restarted job writes a second file; a later value of a step replaces an earlier one). torch's
`SummaryWriter.add_hparams` writes its hyper-parameters into a sub-directory of the run; such a
sub-directory is read into its parent run, its `session_start_info` becoming the run's config.

Why not `EventFileLoader` or `EventAccumulator`: both are made to tail files that are still being
written, so a truncated record ends the file quietly and a corrupt one is logged and skipped —
an import would store half a run and say nothing. Here each TFRecord's length and data CRCs are
checked (the framing of tensorflow/core/lib/io/record_writer.cc; CRC-32C by google-crc32c's C
code when installed, else tensorboard's own `masked_crc32c`) and each record parsed with
tensorboard's `Event` proto; any failure raises `SourceError` naming the file before anything is
written.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from server.importers.core import MissingLibrary, SourceError, SourceRun, text_path

_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")
_HPARAMS = "hparams"
_SCALARS = "scalars"


def read(paths: Sequence[str | Path]) -> list[SourceRun]:
    """Every run under the given directories (or event files), parsed whole."""
    event_pb2, masked_crc32c, make_ndarray, hparams_pb2 = _libraries()
    runs: dict[Path, SourceRun] = {}
    for given in paths:
        root = Path(text_path(given)).resolve()
        if not root.exists():
            raise SourceError(str(given), "no such file or directory")
        for directory, files in _run_dirs(root):
            for path in (directory, *files):
                text_path(path)
            run = SourceRun(
                kind="tensorboard",
                key=str(directory),
                source=str(directory),
                name=_name(root, directory),
            )
            for file in files:
                for event in _events(file, event_pb2, masked_crc32c):
                    _take(run, event, make_ndarray, hparams_pb2, file)
            parent = runs.get(directory.parent)
            if parent is not None and _only_hparams(run):
                _merge(parent, run)
            else:
                runs[directory] = run
    return list(runs.values())


def _libraries() -> tuple[Any, Callable[[bytes], int], Callable[[Any], Any], Any]:
    try:
        from tensorboard.compat.proto import event_pb2
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
        from tensorboard.plugins.hparams import plugin_data_pb2
        from tensorboard.util.tensor_util import make_ndarray
    except ImportError as exc:
        raise MissingLibrary("tensorboard") from exc
    return event_pb2, fast_masked_crc32c() or masked_crc32c, make_ndarray, plugin_data_pb2


def fast_masked_crc32c() -> Callable[[bytes], int] | None:
    """TFRecord's masked CRC-32C computed by google-crc32c's C code, when it is installed:
    tensorboard's own is pure Python and takes most of an import's time (two checksums per
    scalar). The mask is TFRecord's: rotate right by 15 bits, add 0xa282ead8."""
    try:
        import google_crc32c
    except ImportError:
        return None
    if google_crc32c.implementation != "c":
        return None
    value = google_crc32c.value

    def masked(data: bytes) -> int:
        crc: int = value(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    return masked


def _is_event_file(path: Path) -> bool:
    return path.is_file() and "tfevents" in path.name


def _run_dirs(root: Path) -> Iterator[tuple[Path, list[Path]]]:
    """(directory, its event files in name order), parents before their sub-directories."""
    if root.is_file():
        if not _is_event_file(root):
            raise SourceError(str(root), "not a TensorBoard event file (no 'tfevents' in its name)")
        yield root.parent, [root]
        return
    found = False
    for directory in sorted([root, *(p for p in root.rglob("*") if p.is_dir())]):
        files = sorted(p for p in directory.iterdir() if _is_event_file(p))
        if files:
            found = True
            yield directory, files
    if not found:
        raise SourceError(str(root), "holds no TensorBoard event files (*tfevents*)")


def _name(root: Path, directory: Path) -> str:
    base = root if root.is_dir() else root.parent
    relative = directory.relative_to(base.parent)
    return str(relative)


def _events(path: Path, event_pb2: Any, masked_crc32c: Callable[[bytes], int]) -> Iterator[Any]:
    """The file's events, every record's framing and checksums verified."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(str(path), f"cannot be read ({exc.strerror})") from exc
    offset, end = 0, len(data)
    while offset < end:
        if end - offset < _HEADER.size:
            raise SourceError(str(path), f"truncated: a record header cut short at byte {offset}")
        length, length_crc = _HEADER.unpack_from(data, offset)
        if masked_crc32c(data[offset : offset + 8]) != length_crc:
            raise SourceError(
                str(path), f"corrupt: the record length at byte {offset} fails its CRC"
            )
        start = offset + _HEADER.size
        stop = start + length
        if stop + _CRC.size > end:
            raise SourceError(str(path), f"truncated: the record at byte {offset} is cut short")
        payload = data[start:stop]
        if masked_crc32c(payload) != _CRC.unpack_from(data, stop)[0]:
            raise SourceError(str(path), f"corrupt: the record at byte {offset} fails its CRC")
        try:
            yield event_pb2.Event.FromString(payload)
        except Exception as exc:  # protobuf's DecodeError: a record that is not an Event
            raise SourceError(
                str(path), f"corrupt: the record at byte {offset} is not an event"
            ) from exc
        offset = stop + _CRC.size


def _take(
    run: SourceRun, event: Any, make_ndarray: Callable[[Any], Any], hparams_pb2: Any, path: Path
) -> None:
    if not event.HasField("summary"):
        return
    step = int(event.step)
    wall = float(event.wall_time) if event.wall_time > 0 else None
    for value in event.summary.value:
        tag = value.tag
        plugin = value.metadata.plugin_data.plugin_name
        if plugin == _HPARAMS:
            _hparams(run, value.metadata.plugin_data.content, hparams_pb2, path)
            continue
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            run.add(step, tag, float(value.simple_value), wall)
        elif kind == "tensor" and plugin in ("", _SCALARS):
            scalar = _scalar(value.tensor, make_ndarray)
            if scalar is None:
                run.skipped.setdefault(tag, "a tensor that is not one number")
            else:
                run.add(step, tag, scalar, wall)
        else:
            run.skipped.setdefault(tag, f"not a scalar ({plugin or kind})")


def _scalar(tensor: Any, make_ndarray: Callable[[Any], Any]) -> float | None:
    try:
        array = make_ndarray(tensor)
    except Exception:
        return None
    if array.size != 1 or array.dtype.kind not in "fiub":
        return None
    return float(array.reshape(()))


def _hparams(run: SourceRun, content: bytes, hparams_pb2: Any, path: Path) -> None:
    try:
        data = hparams_pb2.HParamsPluginData.FromString(content)
    except Exception as exc:  # protobuf's DecodeError: checksums held, the content does not
        raise SourceError(str(path), "corrupt: an hparams summary cannot be parsed") from exc
    if data.WhichOneof("data") != "session_start_info":
        return
    for key, value in data.session_start_info.hparams.items():
        which = value.WhichOneof("kind")
        if which == "number_value":
            number = float(value.number_value)
            run.config[key] = (
                int(number) if number.is_integer() and math.isfinite(number) else number
            )
        elif which in ("string_value", "bool_value"):
            run.config[key] = getattr(value, which)


def _only_hparams(run: SourceRun) -> bool:
    """A sub-directory made by torch's `add_hparams`: hyper-parameters and their few metrics."""
    return bool(run.config) and len(run.steps) <= 1


def _merge(parent: SourceRun, child: SourceRun) -> None:
    for key, value in child.config.items():
        parent.config.setdefault(key, value)
    for step, values in child.steps.items():
        for name, value in values.items():
            parent.add(step, name, value, child.times.get(step))
    for name, why in child.skipped.items():
        parent.skipped.setdefault(name, why)
