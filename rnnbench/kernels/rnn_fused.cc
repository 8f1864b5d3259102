// The C entry points of the fused recurrences (rnn_fused.h), one per cell, direction of the
// computation and dtype: what PyTorch's custom ops call (rnnbench/torch/backends/fused.py).
#include "rnn_fused.h"

namespace rnnbench {
sgemm_t g_sgemm = nullptr;
dgemm_t g_dgemm = nullptr;
}  // namespace rnnbench

using rnnbench::dgemm_t;
using rnnbench::sgemm_t;

extern "C" {

// The BLAS every call uses: cblas_sgemm / cblas_dgemm with 64-bit integers.
void rnnbench_set_gemm(void* sgemm, void* dgemm) {
  rnnbench::g_sgemm = reinterpret_cast<sgemm_t>(sgemm);
  rnnbench::g_dgemm = reinterpret_cast<dgemm_t>(dgemm);
}

#define RNNBENCH_ENTRY_POINTS(T, SUFFIX)                                                                          \
  void rnnbench_lstm_forward_##SUFFIX(int64_t steps, int64_t batch, int64_t hidden, const T* xg, const T* w_hh,    \
                                      const T* h0, const T* c0, const int64_t* lengths, T* out, T* cs, T* acts,    \
                                      T* h_n, T* c_n) {                                                            \
    rnnbench::lstm_forward<T>(steps, batch, hidden, xg, w_hh, h0, c0, lengths, out, cs, acts, h_n, c_n);          \
  }                                                                                                                \
  void rnnbench_lstm_backward_##SUFFIX(int64_t steps, int64_t batch, int64_t hidden, const T* w_hh, const T* c0,  \
                                       const int64_t* lengths, const T* acts, const T* cs, const T* dout,         \
                                       const T* dh_n, const T* dc_n, T* dgates, T* dh0, T* dc0) {                 \
    rnnbench::lstm_backward<T>(steps, batch, hidden, w_hh, c0, lengths, acts, cs, dout, dh_n, dc_n, dgates, dh0,  \
                               dc0);                                                                               \
  }                                                                                                                \
  void rnnbench_gru_forward_##SUFFIX(int64_t steps, int64_t batch, int64_t hidden, const T* xg, const T* w_hh,     \
                                     const T* b_hh, const T* h0, const int64_t* lengths, T* out, T* acts, T* ghn,  \
                                     T* h_n) {                                                                     \
    rnnbench::gru_forward<T>(steps, batch, hidden, xg, w_hh, b_hh, h0, lengths, out, acts, ghn, h_n);             \
  }                                                                                                                \
  void rnnbench_gru_backward_##SUFFIX(int64_t steps, int64_t batch, int64_t hidden, const T* w_hh, const T* h0,   \
                                      const int64_t* lengths, const T* acts, const T* ghn, const T* out,          \
                                      const T* dout, const T* dh_n, T* dgates_i, T* dgates_h, T* dh0) {            \
    rnnbench::gru_backward<T>(steps, batch, hidden, w_hh, h0, lengths, acts, ghn, out, dout, dh_n, dgates_i,      \
                              dgates_h, dh0);                                                                      \
  }

RNNBENCH_ENTRY_POINTS(float, f32)
RNNBENCH_ENTRY_POINTS(double, f64)

}  // extern "C"
