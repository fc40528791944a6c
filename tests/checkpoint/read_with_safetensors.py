#!/usr/bin/env python3
# Checks lockstep's safetensors files against the reference implementation (pip: safetensors,
# numpy). Not part of the C++ suite. Usage:
#   read_with_safetensors.py FILE     load FILE (written by the C++ test SafetensorsInterop with
#                                     LOCKSTEP_SAFETENSORS_INTEROP_FILE=FILE) and compare every
#                                     value, then check the reference writes the same bytes
#   read_with_safetensors.py --fixture  print the reference's bytes for the recipe as C++ hex
#                                     (the kReferenceFile fixture in safetensors_test.cpp)
import sys

import numpy as np
from safetensors.numpy import load_file, save


def recipe():
    """The tensors of the interop test; keep in sync with interop_tensors() in the C++ test."""
    return {
        "layer.weight": (np.arange(6, dtype=np.float32) * 0.5 - 1.0).reshape(2, 3),
        "layer.bias": np.array([-1.5, 0.0, 2.25], dtype=np.float32),
        "step": np.array(40, dtype=np.int64),
        "ids": np.array([7, -7, 123456789], dtype=np.int32),
        "mask": np.array([1, 0, 1, 1, 255], dtype=np.uint8),
        "half": np.array([1.0, -2.0], dtype=np.float16),
        "empty": np.zeros((0, 3), dtype=np.float64),
    }


METADATA = {"format": "pt"}


def main():
    if len(sys.argv) != 2:
        print(__doc__ or "usage: read_with_safetensors.py FILE | --fixture", file=sys.stderr)
        return 2
    expected = recipe()
    reference_bytes = save(expected, metadata=METADATA)
    if sys.argv[1] == "--fixture":
        hexes = [f"0x{b:02x}" for b in reference_bytes]
        for i in range(0, len(hexes), 16):
            print("    " + ", ".join(hexes[i:i + 16]) + ",")
        return 0
    path = sys.argv[1]
    loaded = load_file(path)
    failures = 0
    if sorted(loaded) != sorted(expected):
        print(f"names differ: {sorted(loaded)} vs {sorted(expected)}")
        failures += 1
    for name, want in expected.items():
        got = loaded.get(name)
        if got is None or got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
            print(f"tensor {name}: got {got!r}, want {want!r}")
            failures += 1
    with open(path, "rb") as f:
        ours = f.read()
    if ours != reference_bytes:
        print(f"bytes differ from the reference writer ({len(ours)} vs {len(reference_bytes)} bytes)")
        failures += 1
    import safetensors
    print(f"{path}: {len(expected)} tensors, safetensors {safetensors.__version__}: "
          + ("OK, values equal and bytes identical to the reference writer" if failures == 0
             else f"{failures} failures"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
