// The fused LSTM and GRU recurrences: the time loop in C++, per step one GEMM and one pass over
// the gates.  One compiled copy serves both frameworks: PyTorch calls the C functions of
// rnn_fused.cc (a torch.library custom op), JAX the XLA FFI handlers of rnn_fused_xla.cc, which
// call the same templates.
//
// What the kernel does, per layer and direction (the stack, the reverse direction's gather and
// the GEMMs over all steps stay in the framework, as in the `bptt` rungs):
//   forward   G_t = XG_t + h_{t-1} W_hh^T     (XG: the input projection of all steps, biases in)
//             one pass over G_t: the gate nonlinearities and the state update, in place
//   backward  one pass per step for the gate gradients dG_t, then dh_{t-1} = dG_t W_hh
// Variable lengths: steps t >= lengths[b] leave row b's state as it was and output zeros (PyTorch's
// packed semantics); in the backward their dG is zero and the carried gradient passes unchanged.
//
// The GEMM is a cblas_?gemm with 64-bit integers, handed in once (`rnnbench_set_gemm`): the same
// BLAS for both frameworks (NumPy's OpenBLAS, which every process of the project has loaded).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace rnnbench {

enum { kRowMajor = 101, kNoTrans = 111, kTrans = 112 };
using sgemm_t = void (*)(int, int, int, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                         int64_t, float, float*, int64_t);
using dgemm_t = void (*)(int, int, int, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                         int64_t, double, double*, int64_t);
extern sgemm_t g_sgemm;
extern dgemm_t g_dgemm;

// C (m, n) = alpha * A (m, k) op(B) + beta * C, row-major; op(B) = B^T when b_trans (B is (n, k)).
inline void gemm(int64_t m, int64_t n, int64_t k, const float* a, const float* b, bool b_trans, float beta, float* c) {
  g_sgemm(kRowMajor, kNoTrans, b_trans ? kTrans : kNoTrans, m, n, k, 1.0f, a, k, b, b_trans ? k : n, beta, c, n);
}
inline void gemm(int64_t m, int64_t n, int64_t k, const double* a, const double* b, bool b_trans, double beta,
                 double* c) {
  g_dgemm(kRowMajor, kNoTrans, b_trans ? kTrans : kNoTrans, m, n, k, 1.0, a, k, b, b_trans ? k : n, beta, c, n);
}

template <typename T>
inline T sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }

inline bool valid(const int64_t* lengths, int64_t t, int64_t b) { return lengths == nullptr || t < lengths[b]; }

// ---- LSTM ------------------------------------------------------------------------------------
// xg (T, B, 4H) input projection with both biases; w_hh (4H, H); h0, c0 (B, H); lengths (B) or null.
// Writes out (T, B, H) (zero past a length), cs (T, B, H) the cell state after each step (held past
// a length), acts (T, B, 4H) the activated gates i, f, g, o (the backward's), h_n, c_n (B, H).
template <typename T>
void lstm_forward(int64_t steps, int64_t batch, int64_t hidden, const T* xg, const T* w_hh, const T* h0,
                  const T* c0, const int64_t* lengths, T* out, T* cs, T* acts, T* h_n, T* c_n) {
  const int64_t H = hidden, G = 4 * hidden;
  std::vector<T> h(h0, h0 + batch * H), c(c0, c0 + batch * H);
  for (int64_t t = 0; t < steps; ++t) {
    T* a = acts + t * batch * G;
    std::memcpy(a, xg + t * batch * G, sizeof(T) * batch * G);
    gemm(batch, G, H, h.data(), w_hh, true, T(1), a);  // a = XG_t + h W_hh^T
    T* o_t = out + t * batch * H;
    T* c_t = cs + t * batch * H;
    for (int64_t b = 0; b < batch; ++b) {
      T* ab = a + b * G;
      T* hb = h.data() + b * H;
      T* cb = c.data() + b * H;
      if (!valid(lengths, t, b)) {  // held: no output, the state as it was
        std::memset(o_t + b * H, 0, sizeof(T) * H);
        std::memcpy(c_t + b * H, cb, sizeof(T) * H);
        continue;
      }
#pragma omp simd
      for (int64_t j = 0; j < H; ++j) {
        const T i = sigmoid(ab[j]), f = sigmoid(ab[H + j]), g = std::tanh(ab[2 * H + j]), o = sigmoid(ab[3 * H + j]);
        const T cn = f * cb[j] + i * g;  // c' = f*c + i*g
        const T hn = o * std::tanh(cn);  // h' = o*tanh(c')
        ab[j] = i, ab[H + j] = f, ab[2 * H + j] = g, ab[3 * H + j] = o;
        cb[j] = cn, hb[j] = hn;
        c_t[b * H + j] = cn, o_t[b * H + j] = hn;
      }
    }
  }
  std::memcpy(h_n, h.data(), sizeof(T) * batch * H);
  std::memcpy(c_n, c.data(), sizeof(T) * batch * H);
}

// dout (T, B, H), dh_n, dc_n (B, H): the incoming gradients; acts, cs from the forward; c0 (B, H).
// Writes dgates (T, B, 4H), the gradients of the gates before their nonlinearities (the framework
// turns them into dx, dW_ih, dW_hh and the biases' gradients, one GEMM each), dh0, dc0 (B, H).
template <typename T>
void lstm_backward(int64_t steps, int64_t batch, int64_t hidden, const T* w_hh, const T* c0, const int64_t* lengths,
                   const T* acts, const T* cs, const T* dout, const T* dh_n, const T* dc_n, T* dgates, T* dh0,
                   T* dc0) {
  const int64_t H = hidden, G = 4 * hidden;
  std::vector<T> dh(dh_n, dh_n + batch * H), dc(dc_n, dc_n + batch * H), next(batch * H);
  for (int64_t t = steps - 1; t >= 0; --t) {
    const T* a = acts + t * batch * G;
    const T* c_t = cs + t * batch * H;
    const T* c_prev = t > 0 ? cs + (t - 1) * batch * H : c0;
    const T* do_t = dout + t * batch * H;
    T* dg = dgates + t * batch * G;
    for (int64_t b = 0; b < batch; ++b) {
      T* dgb = dg + b * G;
      if (!valid(lengths, t, b)) {
        std::memset(dgb, 0, sizeof(T) * G);
        continue;
      }
      const T* ab = a + b * G;
      T* dhb = dh.data() + b * H;
      T* dcb = dc.data() + b * H;
#pragma omp simd
      for (int64_t j = 0; j < H; ++j) {
        const T i = ab[j], f = ab[H + j], g = ab[2 * H + j], o = ab[3 * H + j];
        const T tc = std::tanh(c_t[b * H + j]);
        const T dht = dhb[j] + do_t[b * H + j];
        const T dct = dcb[j] + dht * o * (T(1) - tc * tc);
        dgb[j] = dct * g * i * (T(1) - i);
        dgb[H + j] = dct * c_prev[b * H + j] * f * (T(1) - f);
        dgb[2 * H + j] = dct * i * (T(1) - g * g);
        dgb[3 * H + j] = dht * tc * o * (T(1) - o);
        dcb[j] = dct * f;
      }
    }
    gemm(batch, H, G, dg, w_hh, false, T(0), next.data());  // dh_{t-1} = dG_t W_hh
    for (int64_t b = 0; b < batch; ++b)
      if (valid(lengths, t, b)) std::memcpy(dh.data() + b * H, next.data() + b * H, sizeof(T) * H);
  }
  std::memcpy(dh0, dh.data(), sizeof(T) * batch * H);
  std::memcpy(dc0, dc.data(), sizeof(T) * batch * H);
}

// ---- GRU -------------------------------------------------------------------------------------
// xg (T, B, 3H) = x W_ih^T + b_ih; w_hh (3H, H); b_hh (3H) or null; h0 (B, H).
// Writes out (T, B, H), acts (T, B, 3H) the activated r, z, n, ghn (T, B, H) = W_hn h + b_hn (the
// backward's), h_n (B, H).
template <typename T>
void gru_forward(int64_t steps, int64_t batch, int64_t hidden, const T* xg, const T* w_hh, const T* b_hh, const T* h0,
                 const int64_t* lengths, T* out, T* acts, T* ghn, T* h_n) {
  const int64_t H = hidden, G = 3 * hidden;
  std::vector<T> h(h0, h0 + batch * H), gh(batch * G);
  for (int64_t t = 0; t < steps; ++t) {
    for (int64_t b = 0; b < batch; ++b) {
      if (b_hh) std::memcpy(gh.data() + b * G, b_hh, sizeof(T) * G);
      else std::memset(gh.data() + b * G, 0, sizeof(T) * G);
    }
    gemm(batch, G, H, h.data(), w_hh, true, T(1), gh.data());  // gh = h W_hh^T + b_hh
    const T* x_t = xg + t * batch * G;
    T* a = acts + t * batch * G;
    T* o_t = out + t * batch * H;
    T* n_t = ghn + t * batch * H;
    for (int64_t b = 0; b < batch; ++b) {
      T* hb = h.data() + b * H;
      if (!valid(lengths, t, b)) {
        std::memset(o_t + b * H, 0, sizeof(T) * H);
        continue;
      }
      const T* xb = x_t + b * G;
      const T* gb = gh.data() + b * G;
      T* ab = a + b * G;
#pragma omp simd
      for (int64_t j = 0; j < H; ++j) {
        const T r = sigmoid(xb[j] + gb[j]), z = sigmoid(xb[H + j] + gb[H + j]);
        const T n = std::tanh(xb[2 * H + j] + r * gb[2 * H + j]);  // reset after the recurrent GEMM
        const T hn = (T(1) - z) * n + z * hb[j];
        ab[j] = r, ab[H + j] = z, ab[2 * H + j] = n;
        n_t[b * H + j] = gb[2 * H + j];
        hb[j] = hn, o_t[b * H + j] = hn;
      }
    }
  }
  std::memcpy(h_n, h.data(), sizeof(T) * batch * H);
}

// Writes dgates_i (T, B, 3H), the gradient of x W_ih^T + b_ih, and dgates_h (T, B, 3H), that of
// h W_hh^T + b_hh (they differ in the n block: dn before r scales it), dh0 (B, H).
template <typename T>
void gru_backward(int64_t steps, int64_t batch, int64_t hidden, const T* w_hh, const T* h0, const int64_t* lengths,
                  const T* acts, const T* ghn, const T* out, const T* dout, const T* dh_n, T* dgates_i, T* dgates_h,
                  T* dh0) {
  const int64_t H = hidden, G = 3 * hidden;
  std::vector<T> dh(dh_n, dh_n + batch * H), next(batch * H);
  for (int64_t t = steps - 1; t >= 0; --t) {
    const T* a = acts + t * batch * G;
    const T* h_prev = t > 0 ? out + (t - 1) * batch * H : h0;
    const T* do_t = dout + t * batch * H;
    const T* n_t = ghn + t * batch * H;
    T* di = dgates_i + t * batch * G;
    T* dg = dgates_h + t * batch * G;
    for (int64_t b = 0; b < batch; ++b) {
      if (!valid(lengths, t, b)) {
        std::memset(di + b * G, 0, sizeof(T) * G);
        std::memset(dg + b * G, 0, sizeof(T) * G);
        continue;
      }
      const T* ab = a + b * G;
      T* dhb = dh.data() + b * H;
      T* dib = di + b * G;
      T* dgb = dg + b * G;
#pragma omp simd
      for (int64_t j = 0; j < H; ++j) {
        const T r = ab[j], z = ab[H + j], n = ab[2 * H + j];
        const T dht = dhb[j] + do_t[b * H + j];
        const T dn = dht * (T(1) - z) * (T(1) - n * n);
        const T dz = dht * (h_prev[b * H + j] - n) * z * (T(1) - z);
        const T dr = dn * n_t[b * H + j] * r * (T(1) - r);
        dib[j] = dr, dib[H + j] = dz, dib[2 * H + j] = dn;
        dgb[j] = dr, dgb[H + j] = dz, dgb[2 * H + j] = dn * r;
        dhb[j] = dht * z;  // the direct path; the GEMM's share is added below
      }
    }
    gemm(batch, H, G, dg, w_hh, false, T(0), next.data());  // dG_h W_hh
    for (int64_t b = 0; b < batch; ++b)
      if (valid(lengths, t, b))
        for (int64_t j = 0; j < H; ++j) dh[b * H + j] += next[b * H + j];
  }
  std::memcpy(dh0, dh.data(), sizeof(T) * batch * H);
}

}  // namespace rnnbench
