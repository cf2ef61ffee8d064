"""Input checks shared by the public functions of `mha_lib`.

Every public function validates its arguments once, here, and raises a
`TypeError` (wrong kind of object or dtype) or a `ValueError` (wrong shape)
whose message names the argument, the shape it got and the shape it needs.
`sha256(path)` checks files: the pretrained models' loaders (05, 12) compare it with the
published file's.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np


def as_float_array(x, name: str) -> np.ndarray:
    """Return `x` as a floating numpy array; integers become float64.

    Raises TypeError for booleans, complex numbers, strings and objects.
    """
    if isinstance(x, np.ndarray):
        arr = x
    else:
        try:
            arr = np.asarray(x)
        except Exception as exc:  # ragged lists and the like
            raise TypeError(f"{name} must be an array of numbers; got {type(x).__name__}") from exc
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise TypeError(f"{name} must hold real numbers; got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.integer):
        arr = arr.astype(np.float64)
    return arr


def check_ndim(arr: np.ndarray, name: str, allowed: tuple[int, ...], expected: str) -> None:
    """Raise ValueError unless `arr.ndim` is one of `allowed`."""
    if arr.ndim not in allowed:
        raise ValueError(f"{name} has shape {arr.shape}; expected {expected}")


def check_min_ndim(arr: np.ndarray, name: str, min_ndim: int, expected: str) -> None:
    """Raise ValueError if `arr` has fewer than `min_ndim` axes."""
    if arr.ndim < min_ndim:
        raise ValueError(f"{name} has shape {arr.shape}; expected {expected}")


def check_mask(mask, target_shape: tuple[int, ...], expected: str) -> np.ndarray:
    """Return `mask` as a boolean array that broadcasts to `target_shape`.

    The mask convention of the whole numpy core: True = may attend.
    """
    if not isinstance(mask, np.ndarray):
        mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise TypeError(
            f"mask must be a boolean array (True = may attend); got dtype {mask.dtype}. "
            "Convert an additive float mask with `mask = (float_mask == 0)`."
        )
    ok = mask.ndim <= len(target_shape) and all(
        m in (1, t) for m, t in zip(mask.shape[::-1], target_shape[::-1])
    )
    if not ok:
        raise ValueError(
            f"mask has shape {mask.shape}; expected a shape that broadcasts to "
            f"{target_shape} {expected}"
        )
    return mask


def check_num_heads(num_heads, width: int, name: str, what: str) -> None:
    """Raise unless `num_heads` is a positive int that divides `width`."""
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)):
        raise TypeError(f"num_heads must be an int; got {type(num_heads).__name__}")
    if num_heads < 1:
        raise ValueError(f"num_heads must be at least 1; got {num_heads}")
    if width % num_heads != 0:
        raise ValueError(
            f"num_heads = {num_heads} does not divide the width of {name}, {width} "
            f"(= h*{what}); expected a width that is a multiple of num_heads"
        )


def check_int(value, name: str, minimum: int = 1, *, numpy: bool = False) -> int:
    """Return `value` if it is an int (not a bool) of at least `minimum`, else raise.

    TypeError for anything that is not an int, ValueError for one below `minimum`. With
    `numpy=True` a numpy integer is taken too and returned as an int (sizes read off arrays).
    """
    if numpy and isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int; got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}; got {value}")
    return value


def sha256(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
