#!/usr/bin/env python3
"""Minimax fit of the exp polynomial in kernels/src/math/exp.rs (needs mpmath).

p(r) ~= exp(r) on r in [-ln2/2, ln2/2], p of degree DEG (argv[1], default 6), minimizing
the maximum relative error |p/exp - 1| by the Remez exchange algorithm. Prints p's
coefficients rounded to f32 and the max relative error of the f32-rounded polynomial.
"""
import struct
import sys

import mpmath as mp

mp.mp.dps = 40
DEG = int(sys.argv[1]) if len(sys.argv) > 1 else 6
a, b = -mp.log(2) / 2, mp.log(2) / 2
n = DEG + 2
xs = [(a + b) / 2 - (b - a) / 2 * mp.cos(mp.pi * i / (n - 1)) for i in range(n)]


def rel_err(c, x):
    return sum(c[j] * x**j for j in range(DEG + 1)) / mp.exp(x) - 1


for _ in range(20):
    # p(x_i) - exp(x_i) = (-1)^i E exp(x_i): equioscillating relative error E.
    A = mp.matrix(n, n)
    rhs = mp.matrix(n, 1)
    for i, x in enumerate(xs):
        for j in range(DEG + 1):
            A[i, j] = x**j
        A[i, DEG + 1] = -((-1) ** i) * mp.exp(x)
        rhs[i] = mp.exp(x)
    sol = mp.lu_solve(A, rhs)
    c = [sol[j] for j in range(DEG + 1)]
    # New reference: the extremum of the error in each interval of constant sign.
    grid = [a + (b - a) * k / 2000 for k in range(2001)]
    vals = [rel_err(c, x) for x in grid]
    ext, start = [], 0
    for k in range(1, len(grid) + 1):
        if k == len(grid) or mp.sign(vals[k]) != mp.sign(vals[start]):
            ext.append(grid[max(range(start, k), key=lambda t: abs(vals[t]))])
            start = k
    if len(ext) == n:
        xs = ext


def to_f32(x):
    return struct.unpack("f", struct.pack("f", float(x)))[0]


cf = [to_f32(x) for x in c]
print("max relative error, exact coefficients:", mp.nstr(max(abs(v) for v in vals), 4))
for j, x in enumerate(cf):
    print(f"c{j} = {x!r}")
worst = max(abs(rel_err(cf, a + (b - a) * k / 20000)) for k in range(20001))
print("max relative error, f32 coefficients:", mp.nstr(worst, 4), "=", mp.nstr(worst * 2**24, 3), "u")
