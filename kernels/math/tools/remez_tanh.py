#!/usr/bin/env python3
"""Derives the CanonicalTanh small-argument polynomial (documentation tool).

tanh(x) ~= x + x*z*P(z), z = x*x, |x| <= T. P has `degree` + 1 coefficients
and minimises the maximum relative error of the tanh approximation
  eps(x) = x*z*(P(z) - g(z)) / tanh(x),   g(z) = (tanh(x) - x) / (x*z),
by the Remez exchange algorithm. Reference values come from Python's decimal
module at 50 digits, so no third-party packages are needed. Coefficients are
rounded to float one at a time, lowest order first, re-optimising the rest
after each rounding. The printed coefficients (hex floats) and the maximum
relative error of the float polynomial (evaluated exactly) are the ones in
portable_math.h and SPEC.md; rerunning this script reproduces them.

Usage: remez_tanh.py T degree
"""
import decimal
import struct
import sys

decimal.getcontext().prec = 50
D = decimal.Decimal


def tanh_dec(x):
  e = (2 * D(x)).exp()
  return (e - 1) / (e + 1)


def g_of_z(z):
  x = D(z).sqrt()
  return float((tanh_dec(x) - x) / (x * D(z)))


def weight(z):
  x = D(z).sqrt()
  return float(x * D(z) / tanh_dec(x))


def solve(a, b):
  n = len(b)
  m = [row[:] + [b[i]] for i, row in enumerate(a)]
  for c in range(n):
    p = max(range(c, n), key=lambda r: abs(m[r][c]))
    m[c], m[p] = m[p], m[c]
    for r in range(n):
      if r != c:
        f = m[r][c] / m[c][c]
        for k in range(c, n + 1):
          m[r][k] -= f * m[c][k]
  return [m[i][n] / m[i][i] for i in range(n)]


def to_float(v):
  return struct.unpack('f', struct.pack('f', v))[0]


def remez(zmax, degree, fixed=(), iters=30, grid=20000):
  """Remez for P of `degree` whose first len(fixed) coefficients are fixed."""
  import math
  nf = len(fixed)
  n = degree + 1 - nf
  pts = [zmax * (1 - math.cos(math.pi * i / (n))) / 2 for i in range(n + 1)]
  pts[0] = zmax * 1e-9
  zs = [zmax * (i + 0.5) / grid for i in range(grid)]
  def target(z):
    return g_of_z(z) - sum(c * z**j for j, c in enumerate(fixed))

  def fixed_part(z):
    return sum(c * z**j for j, c in enumerate(fixed))

  gs = [g_of_z(z) - fixed_part(z) for z in zs]
  ws = [weight(z) for z in zs]
  coeffs = None
  for _ in range(iters):
    # Unknown coefficient j multiplies z^(nf + j); scaled by zmax^(nf + j).
    a = [[(z / zmax) ** (nf + j) for j in range(n)] + [(-1) ** i / weight(z)]
         for i, z in enumerate(pts)]
    sol = solve(a, [target(z) for z in pts])
    c = sol[:n]
    err = [ws[i] * (sum(c[j] * (zs[i] / zmax) ** (nf + j) for j in range(n)) -
                    gs[i]) for i in range(grid)]
    # Pick alternating extrema.
    ext = []
    i = 0
    while i < grid:
      j = i
      while j + 1 < grid and (err[j + 1] > 0) == (err[i] > 0):
        j += 1
      k = max(range(i, j + 1), key=lambda t: abs(err[t]))
      ext.append(k)
      i = j + 1
    while len(ext) > n + 1:
      if abs(err[ext[0]]) < abs(err[ext[-1]]):
        ext.pop(0)
      else:
        ext.pop()
    if len(ext) == n + 1:
      pts = [zs[k] for k in ext]
    coeffs = list(fixed) + [c[j] / zmax ** (nf + j) for j in range(n)]
    maxerr = max(abs(e) for e in err)
  return coeffs, maxerr


def main():
  t = float(sys.argv[1])
  degree = int(sys.argv[2])
  # Round one coefficient to float at a time, lowest order first, and
  # re-optimise the remaining ones around it, so that the float polynomial
  # stays close to minimax.
  fixed = []
  for _ in range(degree + 1):
    coeffs, maxerr = remez(t * t, degree, tuple(fixed))
    fixed.append(to_float(coeffs[len(fixed)]))
  coeffs = fixed
  _, maxerr = remez(t * t, degree, tuple(fixed[:-1]))
  zs = [t * t * (i + 0.5) / 20000 for i in range(20000)]
  maxerr = max(abs(weight(z) * (sum(c * z**j for j, c in enumerate(coeffs)) -
                                g_of_z(z))) for z in zs)
  print('max relative error %.3e (%.3f ULP at 2^-24)' % (maxerr,
                                                        maxerr / 2**-24))
  for j, c in enumerate(coeffs):
    print('c%d = %s  (%r)' % (j, float.hex(to_float(c)), c))


if __name__ == '__main__':
  main()
