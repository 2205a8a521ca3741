"""Pickle-free serialisation of model and run checkpoints.

A checkpoint is a nested structure of dicts, lists, tuples, scalars, strings, NumPy arrays and
torch tensors (a model's ``state_dict``, a fleet run's state). Pickle would store it in one call,
but unpickling a file runs whatever code the file names, and checkpoints travel: a state
directory handed to a colleague, a grid folder on a shared file system. So this module writes

* every array and tensor as a plain array of a numeric/boolean dtype in an uncompressed ``.npz``
  (read back with ``allow_pickle=False``), and
* the structure around them (dict keys, list order, scalars, which arrays were tensors) as a JSON
  header stored in the same archive,

behind a magic prefix. Decoding never unpickles: an old ``torch.save`` blob, a planted pickle or
an object array is refused with :class:`~ev_nav.errors.UnsafeCheckpointError` before any of its
content is interpreted. Floats round-trip exactly (JSON writes ``repr``), arrays byte-for-byte.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np

from ev_nav.errors import ModelStateError, UnsafeCheckpointError

if TYPE_CHECKING:  # torch is imported only when a checkpoint holds tensors
    import torch

MAGIC = b"EVNAV-CKPT-1\n"
_HEADER = "__header__"
# Dtype kinds that an array may have: bool, signed/unsigned int, float, complex (no objects).
_SAFE_KINDS = frozenset("biufc")

__all__ = ["MAGIC", "decode", "encode", "is_safe_format"]


def is_safe_format(blob: bytes) -> bool:
    """Whether ``blob`` starts with this module's magic prefix."""
    return bytes(blob[: len(MAGIC)]) == MAGIC


def encode(obj: Any) -> bytes:
    """Serialise a nested checkpoint structure to bytes (no pickle anywhere).

    Raises
    ------
    ModelStateError
        If the structure holds something other than dicts (str/int keys), lists, tuples, None,
        bool, int, float, str, NumPy scalars/arrays of numeric dtype, or torch tensors.
    """
    arrays: dict[str, np.ndarray] = {}
    header = _encode(obj, arrays, "")
    text = json.dumps(header, allow_nan=True, separators=(",", ":"))
    arrays[_HEADER] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    buf = io.BytesIO()
    buf.write(MAGIC)
    np.savez(buf, **arrays)
    return buf.getvalue()


def decode(blob: bytes, *, tensors: bool = True) -> Any:
    """Read bytes written by :func:`encode`.

    With ``tensors=False`` what was stored as a torch tensor comes back as the NumPy array it
    was stored as (same values and dtype): a reader that needs no torch (planning) never
    imports it.

    Raises
    ------
    UnsafeCheckpointError
        If the bytes are not in this format (an old pickled checkpoint, a planted file); nothing
        in them is interpreted.
    ModelStateError
        If they are in this format but damaged.
    """
    data = bytes(blob)
    if not is_safe_format(data):
        kind = "a zip archive (torch.save/pickle)" if data[:2] == b"PK" else "not ev-nav's format"
        raise UnsafeCheckpointError(
            f"checkpoint refused unread: {kind}; only pickle-free ev-nav checkpoints are loaded"
        )
    body = io.BytesIO(data[len(MAGIC) :])
    try:
        with zipfile.ZipFile(body) as zf:
            # np.savez stores entries uncompressed; a compressed entry is foreign (a zip bomb
            # could hide behind it), so refuse before inflating anything.
            if any(info.compress_type != zipfile.ZIP_STORED for info in zf.infolist()):
                raise ModelStateError("checkpoint damaged: compressed entries")
        body.seek(0)
        with np.load(body, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except ModelStateError:
        raise
    except Exception as exc:  # zipfile.BadZipFile, ValueError (object arrays), EOFError, ...
        raise ModelStateError(f"checkpoint damaged or not readable ({exc})") from None
    if _HEADER not in arrays:
        raise ModelStateError("checkpoint damaged: no header")
    try:
        header = json.loads(arrays.pop(_HEADER).tobytes().decode("utf-8"))
        return _decode(header, arrays, tensors)
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelStateError(f"checkpoint damaged: bad header ({exc})") from None


# ----------------------------------------------------------------------------- encoding
def _array_node(arr: np.ndarray, arrays: dict[str, np.ndarray], tag: str) -> dict[str, Any]:
    if arr.dtype.kind not in _SAFE_KINDS:
        raise ModelStateError(f"cannot store an array of dtype {arr.dtype} in a checkpoint")
    key = f"a{len(arrays)}"
    arrays[key] = np.asarray(arr, order="C")  # (ascontiguousarray would make 0-d arrays 1-d)
    return {tag: key}


def _encode(obj: Any, arrays: dict[str, np.ndarray], path: str) -> Any:
    if obj is None or isinstance(obj, bool | str):
        return obj
    if isinstance(obj, int | float) and not isinstance(obj, np.generic):
        if isinstance(obj, float):
            return {"__float__": repr(obj)}  # exact, and NaN/inf survive strict JSON readers
        return obj
    if isinstance(obj, np.generic):  # NumPy scalar: keep its dtype as a 0-d array
        return _array_node(np.asarray(obj), arrays, "__npscalar__")
    if isinstance(obj, np.ndarray):
        return _array_node(obj, arrays, "__array__")
    if _is_tensor(obj):
        node = _array_node(obj.detach().cpu().numpy(), arrays, "__tensor__")
        return node
    if isinstance(obj, Mapping):
        items = []
        for k, v in obj.items():
            if not isinstance(k, str | int) or isinstance(k, bool):
                raise ModelStateError(f"checkpoint key {k!r} at {path or '/'} is not str or int")
            items.append([k, _encode(v, arrays, f"{path}/{k}")])
        return {"__dict__": items}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, arrays, f"{path}/{i}") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_encode(v, arrays, f"{path}/{i}") for i, v in enumerate(obj)]
    raise ModelStateError(
        f"cannot store {type(obj).__name__} at {path or '/'} in a checkpoint (plain data only)"
    )


def _is_tensor(obj: Any) -> bool:
    # Avoid importing torch for checkpoints without tensors (the BI model's).
    return type(obj).__module__.startswith("torch") and hasattr(obj, "detach")


# ----------------------------------------------------------------------------- decoding
def _decode(node: Any, arrays: Mapping[str, np.ndarray], tensors: bool) -> Any:
    if node is None or isinstance(node, bool | int | str):
        return node
    if isinstance(node, list):
        return [_decode(v, arrays, tensors) for v in node]
    if not isinstance(node, dict) or len(node) != 1:
        raise ValueError(f"unexpected header node {node!r:.80}")
    (tag, value), = node.items()
    if tag == "__float__":
        return float(value)
    if tag == "__array__":
        return arrays[value].copy()
    if tag == "__npscalar__":
        return arrays[value][()]
    if tag == "__tensor__":
        return _tensor(arrays[value]) if tensors else arrays[value].copy()
    if tag == "__tuple__":
        return tuple(_decode(v, arrays, tensors) for v in value)
    if tag == "__dict__":
        return {k: _decode(v, arrays, tensors) for k, v in value}
    raise ValueError(f"unknown header tag {tag!r}")


def _tensor(arr: np.ndarray) -> torch.Tensor:
    import torch

    return torch.from_numpy(arr.copy())


def check_model_header(
    state: Mapping[str, Any],
    *,
    kind: str,
    version: int,
    what: str,
    n_segments: int,
    network_hash: str,
    config: object | None = None,
) -> None:
    """Refuse a model checkpoint saved by another model kind, format version, network or config.

    Parameters
    ----------
    state
        The decoded checkpoint (a model's ``state_dict``).
    kind, version
        The loading model's ``state["kind"]`` and format version.
    what
        How the error names the expected checkpoint ("an SVGP", "a BI model", ...).
    n_segments, network_hash
        The loading model's network, which must be the one the checkpoint was saved for.
    config
        The loading model's config dataclass, if it has one. A field added after the checkpoint
        was written counts as holding its default (the behaviour of the version that wrote it).

    Raises
    ------
    ModelStateError
        On any mismatch, with the way to load the checkpoint where there is one.
    """
    if state.get("kind") != kind or state.get("version") != version:
        raise ModelStateError(f"not {what} checkpoint (or from another ev-nav version)")
    if int(state["n_segments"]) != n_segments or state.get("network_hash") != network_hash:
        raise ModelStateError(
            "checkpoint was saved for a different road network; load it with that network"
        )
    if config is None:
        return
    cls = type(config)
    saved = {**asdict(cls()), **dict(state["config"])}
    if saved != asdict(config):
        raise ModelStateError(
            f"checkpoint was saved with a different {cls.__name__}; build the model with "
            f"{cls.__name__}(**state['config']) first (saved: {saved})"
        )
