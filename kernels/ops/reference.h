// Float64 reference implementations of the dense-family ops, for tests.
//
// Plain loops in the textbook order, every operation in double, no attempt
// at the canonical order: the canonical float32 ops are checked against
// these within a stated bound, and bit for bit on inputs where every sum is
// exact (small integers), which makes the order irrelevant.
//
// Test-only. Inputs are float32 arrays (as the ops see them); outputs are
// double vectors in the layout of the op's output.
#ifndef LOCKSTEP_KERNELS_OPS_REFERENCE_H_
#define LOCKSTEP_KERNELS_OPS_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace lockstep::reference {

// X(i, p) of x stored [m, k] or, transposed, [k, m].
inline double XAt(const std::vector<float>& x, int64_t m, int64_t k, bool tx,
                  int64_t i, int64_t p) {
  return tx ? x[p * m + i] : x[i * k + p];
}
// W(p, j) of w stored [k, n] or, transposed, [n, k].
inline double WAt(const std::vector<float>& w, int64_t k, int64_t n, bool tw,
                  int64_t p, int64_t j) {
  return tw ? w[j * k + p] : w[p * n + j];
}

// y[m, n] = X W.
inline std::vector<double> Dense(const std::vector<float>& x,
                                 const std::vector<float>& w, int64_t m,
                                 int64_t k, int64_t n, bool tx, bool tw) {
  std::vector<double> y(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p)
        acc += XAt(x, m, k, tx, i, p) * WAt(w, k, n, tw, p, j);
      y[i * n + j] = acc;
    }
  return y;
}

// dX = dy W^T, stored in x's layout.
inline std::vector<double> DenseGradInput(const std::vector<float>& dy,
                                          const std::vector<float>& w,
                                          int64_t m, int64_t k, int64_t n,
                                          bool tx, bool tw) {
  std::vector<double> dx(m * k, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      double acc = 0.0;
      for (int64_t j = 0; j < n; ++j)
        acc += static_cast<double>(dy[i * n + j]) * WAt(w, k, n, tw, p, j);
      dx[tx ? p * m + i : i * k + p] = acc;
    }
  return dx;
}

// dW = X^T dy, stored in w's layout.
inline std::vector<double> DenseGradWeight(const std::vector<float>& x,
                                           const std::vector<float>& dy,
                                           int64_t m, int64_t k, int64_t n,
                                           bool tx, bool tw) {
  std::vector<double> dw(k * n, 0.0);
  for (int64_t p = 0; p < k; ++p)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t i = 0; i < m; ++i)
        acc += XAt(x, m, k, tx, i, p) * static_cast<double>(dy[i * n + j]);
      dw[tw ? j * k + p : p * n + j] = acc;
    }
  return dw;
}

// x [n, c, spatial] + b[c].
inline std::vector<double> BiasAdd(const std::vector<float>& x,
                                   const std::vector<float>& b, int64_t n,
                                   int64_t c, int64_t spatial) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t s = 0; s < spatial; ++s) {
        const int64_t idx = (i * c + ch) * spatial + s;
        y[idx] = static_cast<double>(x[idx]) + b[ch];
      }
  return y;
}

inline std::vector<double> BiasAddGrad(const std::vector<float>& dy, int64_t n,
                                       int64_t c, int64_t spatial) {
  std::vector<double> db(c, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t s = 0; s < spatial; ++s)
        db[ch] += dy[(i * c + ch) * spatial + s];
  return db;
}

inline std::vector<double> Relu(const std::vector<float>& x) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] > 0 ? x[i] : 0.0;
  return y;
}

inline std::vector<double> ReluGrad(const std::vector<float>& x,
                                    const std::vector<float>& dy) {
  std::vector<double> dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) dx[i] = x[i] > 0 ? dy[i] : 0.0;
  return dx;
}

inline std::vector<double> Add(const std::vector<float>& a,
                               const std::vector<float>& b) {
  std::vector<double> y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = static_cast<double>(a[i]) + b[i];
  return y;
}

// Mean softmax cross-entropy over n examples of c classes.
inline double SoftmaxXent(const std::vector<float>& logits,
                          const std::vector<int32_t>& labels, int64_t n,
                          int64_t c) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double m = logits[i * c];
    for (int64_t j = 1; j < c; ++j) m = std::max<double>(m, logits[i * c + j]);
    double s = 0.0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(logits[i * c + j] - m);
    total += std::log(s) - (logits[i * c + labels[i]] - m);
  }
  return total / static_cast<double>(n);
}

inline std::vector<double> SoftmaxXentGrad(const std::vector<float>& logits,
                                           const std::vector<int32_t>& labels,
                                           int64_t n, int64_t c) {
  std::vector<double> g(n * c);
  for (int64_t i = 0; i < n; ++i) {
    double m = logits[i * c];
    for (int64_t j = 1; j < c; ++j) m = std::max<double>(m, logits[i * c + j]);
    double s = 0.0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(logits[i * c + j] - m);
    for (int64_t j = 0; j < c; ++j) {
      const double p = std::exp(logits[i * c + j] - m) / s;
      g[i * c + j] =
          (p - (j == labels[i] ? 1.0 : 0.0)) / static_cast<double>(n);
    }
  }
  return g;
}

// One SGD step in double: returns the new w.
inline std::vector<double> Sgd(const std::vector<float>& w,
                               const std::vector<float>& g, double lr) {
  std::vector<double> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) out[i] = w[i] - lr * g[i];
  return out;
}

// One momentum step in double: updates w and v (as doubles).
inline void Momentum(std::vector<double>& w, std::vector<double>& v,
                     const std::vector<float>& g, double lr, double mu) {
  for (size_t i = 0; i < w.size(); ++i) {
    v[i] = mu * v[i] + g[i];
    w[i] = w[i] - lr * v[i];
  }
}

// One Adam step (1-based t) in double: updates w, m, v.
inline void Adam(std::vector<double>& w, std::vector<double>& m,
                 std::vector<double>& v, const std::vector<float>& g, double lr,
                 double b1, double b2, double eps, int64_t t) {
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(t));
  for (size_t i = 0; i < w.size(); ++i) {
    m[i] = b1 * m[i] + (1.0 - b1) * g[i];
    v[i] = b2 * v[i] + (1.0 - b2) * static_cast<double>(g[i]) * g[i];
    w[i] = w[i] - lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps);
  }
}

}  // namespace lockstep::reference

#endif  // LOCKSTEP_KERNELS_OPS_REFERENCE_H_
