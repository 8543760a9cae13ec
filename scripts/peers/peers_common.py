"""What both peer scripts set up and report the same way: the allocator, and the CPU's name."""

import ctypes
from pathlib import Path


def keep_freed_memory():
    """Keeps freed blocks under 32 MiB in the heap rather than returning them to the system.

    PyTorch allocates a fresh output at each call; with glibc's adaptive mmap threshold and heap
    trimming, whether that costs page faults depended on the cases run before (add_layer_norm
    measured up to 7x slower), so every contender runs with this fixed allocator state instead.
    """
    libc = ctypes.CDLL(None)
    libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
    libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD, at its largest


def cpu_name():
    """The model name, with the x86 family and model numbers where /proc/cpuinfo gives them
    (virtual machines name a Zen 4 and a Zen 5 alike "AMD EPYC"), as the report's headline."""
    fields = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name", "unknown CPU")
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name
