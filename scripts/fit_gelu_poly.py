#!/usr/bin/env python3
"""Minimax fit of the GELU tail polynomial in kernels/src/math/gelu.rs (needs mpmath).

The lower tail of the normal distribution is Phi(-a) = exp(-a^2/2) * G(a). The kernel computes
G(a) = d * Q(s) with d = 1/(a + 3) and s = ALPHA*d + BETA (ALPHA and BETA exact in f32), which
maps a in [0, A_MAX] onto about [-1, 1]. This fits Q of degree DEG (argv[1], default 10)
minimizing the maximum relative error |d*Q(s)/G(a) - 1| by the Remez exchange algorithm, rounds
the coefficients to f32, then moves each by a few ulps at a time while that lowers the maximum
error (rounding alone costs about as much as the fit: Q falls from 1.5 to 0.5). Prints the
coefficients, highest degree first, and the max relative error before and after rounding.
"""
import struct
import sys

import mpmath as mp

mp.mp.dps = 30
DEG = int(sys.argv[1]) if len(sys.argv) > 1 else 10
C = 3
A_MAX = mp.mpf("13.25")
ALPHA = mp.mpf("7.359375")
BETA = mp.mpf("-1.453125")
S_LO = ALPHA / (A_MAX + C) + BETA
S_HI = ALPHA / C + BETA


def target(s):
    """Q(s) = G(a)/d."""
    d = (s - BETA) / ALPHA
    a = 1 / d - C
    return mp.erfc(a / mp.sqrt(2)) / 2 * mp.exp(a * a / 2) / d


def points(count):
    return [S_LO + (S_HI - S_LO) * mp.mpf(k) / (count - 1) for k in range(count)]


def remez():
    """Coefficients of the minimax Q, constant term first, and its max relative error."""
    n = DEG + 2
    mid, half = (S_HI + S_LO) / 2, (S_HI - S_LO) / 2
    xs = [mid - half * mp.cos(mp.pi * i / (n - 1)) for i in range(n)]
    grid = points(3001)
    for _ in range(30):
        # Q(x_i) - target(x_i) = (-1)^i E target(x_i): equioscillating relative error E.
        a = mp.matrix(n, n)
        rhs = mp.matrix(n, 1)
        for i, x in enumerate(xs):
            fx = target(x)
            for j in range(DEG + 1):
                a[i, j] = x**j
            a[i, DEG + 1] = -((-1) ** i) * fx
            rhs[i] = fx
        sol = mp.lu_solve(a, rhs)
        c = [sol[j] for j in range(DEG + 1)]
        err = [sum(c[j] * x**j for j in range(DEG + 1)) / target(x) - 1 for x in grid]
        ext, start = [], 0
        for k in range(1, len(grid) + 1):
            if k == len(grid) or mp.sign(err[k]) != mp.sign(err[start]):
                ext.append(grid[max(range(start, k), key=lambda t: abs(err[t]))])
                start = k
        if len(ext) == n:
            xs = ext
    return c, max(abs(e) for e in err)


def to_f32(x):
    return struct.unpack("f", struct.pack("f", float(x)))[0]


def ulps(x, k):
    """The f32 `k` steps of one ulp from `x` (away from zero for positive k)."""
    bits = struct.unpack("I", struct.pack("f", x))[0] + k
    return struct.unpack("f", struct.pack("I", bits))[0]


def shortest(x):
    for digits in range(6, 10):
        text = "%.*g" % (digits, x)
        if to_f32(text) == x:
            return text


CHECK = [(float(x), float(target(x))) for x in points(4001)]


def worst(c):
    """Max relative error of Q with coefficients c, in double precision."""
    w = 0.0
    for x, t in CHECK:
        q = 0.0
        for cj in reversed(c):
            q = q * x + cj
        w = max(w, abs(q / t - 1))
    return w


exact, exact_err = remez()
c = [to_f32(x) for x in exact]
best = worst(c)
improved = True
while improved:
    improved = False
    for j in range(len(c)):
        for k in (-3, -2, -1, 1, 2, 3):
            trial = list(c)
            trial[j] = ulps(c[j], k)
            w = worst(trial)
            if w < best:
                best, c, improved = w, trial, True
print("max relative error, exact coefficients:", mp.nstr(exact_err * 2**24, 3), "u")
print("max relative error, f32 coefficients:", mp.nstr(mp.mpf(best) * 2**24, 3), "u")
print("Q, highest degree first:", ", ".join(shortest(x) for x in reversed(c)))
