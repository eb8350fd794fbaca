#!/usr/bin/env python3
"""How small can the otel dataset's float gauges be stored losslessly?

Simulates the two float formulas of crates/datagen (otel_series/otel_step): request
durations a*exp(0.3*N), a ~ U(5, 205), and CPU utilizations clamp(a + 0.05*N, 0, 1),
a ~ U(0.05, 0.65); 10 + 12 of the 35 series per resource, 60 resources, 240 points per
series, as `cargo xtask peers --dataset otel` sends them (full-precision doubles). Prints
the bytes per value that xz -9e reaches on the raw doubles and on their byte planes (the
best general-purpose result; the 52 random mantissa bits alone are 6.5 bytes).
Usage: python3 docs/results/scripts/otel_float_floor.py
"""
import lzma
import math
import random
import struct

random.seed(1)
values = []
for _resource in range(60):
    for _ in range(10):
        a = 5 + random.random() * 200
        values += [a * math.exp(0.3 * random.gauss(0, 1)) for _ in range(240)]
    for _ in range(12):
        a = 0.05 + random.random() * 0.6
        values += [min(1.0, max(0.0, a + 0.05 * random.gauss(0, 1))) for _ in range(240)]
n = len(values)
raw = b"".join(struct.pack("<d", v) for v in values)
planes = b"".join(raw[i::8] for i in range(8))
preset = 9 | lzma.PRESET_EXTREME
print(f"{n} float values")
print(f"xz -9e, raw doubles:  {len(lzma.compress(raw, preset=preset)) / n:.2f} bytes/value")
print(f"xz -9e, byte planes:  {len(lzma.compress(planes, preset=preset)) / n:.2f} bytes/value")
