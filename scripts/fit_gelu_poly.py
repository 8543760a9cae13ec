#!/usr/bin/env python3
"""Minimax fit of the GELU tail polynomial in kernels/src/math/gelu.rs (needs mpmath).

The lower tail of the normal distribution is Phi(-a) = exp(-a^2/2) * G(a) with
G(a) = t * P(s), t = 3/(3 + a), s = (17t - 10)/7 in [-1, 1] for a in [0, 14]. Fits P of degree
DEG (argv[1], default 10) minimizing the maximum relative error |t*P(s)/G(a) - 1| by the Remez
exchange algorithm; prints P's coefficients rounded to f32, highest degree first, and the max
relative error of the f32-rounded polynomial.
"""
import struct
import sys

import mpmath as mp

mp.mp.dps = 30
DEG = int(sys.argv[1]) if len(sys.argv) > 1 else 10
T_MIN = mp.mpf(3) / (3 + 14)


def t_of(s):
    return T_MIN + (s + 1) / 2 * (1 - T_MIN)


def target(s):
    """P(s) = G(a)/t."""
    t = t_of(s)
    a = 3 / t - 3
    return mp.erfc(a / mp.sqrt(2)) / 2 * mp.exp(a * a / 2) / t


def rel_err(c, s):
    return sum(c[j] * s**j for j in range(DEG + 1)) / target(s) - 1


n = DEG + 2
xs = [-mp.cos(mp.pi * i / (n - 1)) for i in range(n)]
for _ in range(30):
    # p(s_i) - P(s_i) = (-1)^i E P(s_i): equioscillating relative error E.
    A = mp.matrix(n, n)
    rhs = mp.matrix(n, 1)
    for i, x in enumerate(xs):
        fx = target(x)
        for j in range(DEG + 1):
            A[i, j] = x**j
        A[i, DEG + 1] = -((-1) ** i) * fx
        rhs[i] = fx
    sol = mp.lu_solve(A, rhs)
    c = [sol[j] for j in range(DEG + 1)]
    grid = [-1 + 2 * mp.mpf(k) / 3000 for k in range(3001)]
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


cf = [mp.mpf(to_f32(x)) for x in c]
print("max relative error, exact coefficients:", mp.nstr(max(abs(v) for v in vals), 4))
for j in reversed(range(DEG + 1)):
    print(f"c{j} = {float(cf[j])!r}")
worst = max(abs(rel_err(cf, -1 + 2 * mp.mpf(k) / 20000)) for k in range(20001))
print("max relative error, f32 coefficients:", mp.nstr(worst, 4), "=", mp.nstr(worst * 2**24, 3), "u")
