// The fused recurrences (rnn_fused.h) as XLA FFI handlers for the CPU: what JAX's custom calls run
// (rnnbench/jax/backends/fused.py).  Compiled together with rnn_fused.cc, against the headers
// jax.ffi.include_dir() names.
#include "rnn_fused.h"
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

template <typename T>
T* ptr(ffi::AnyBuffer b) { return static_cast<T*>(b.untyped_data()); }
template <typename T>
T* ptr(ffi::Result<ffi::AnyBuffer> b) { return static_cast<T*>(b->untyped_data()); }

// JAX without x64 hands int32 lengths: the kernel takes int64.
std::vector<int64_t> lengths_of(ffi::AnyBuffer b) {
  const int64_t n = b.element_count();
  if (b.element_type() == ffi::DataType::S64) {
    const auto* p = static_cast<const int64_t*>(b.untyped_data());
    return std::vector<int64_t>(p, p + n);
  }
  const auto* p = static_cast<const int32_t*>(b.untyped_data());
  return std::vector<int64_t>(p, p + n);
}

// (T, B, G) of the gate buffer; lengths always come as (B,) integers (all T when none were asked).
ffi::Error LstmForward(ffi::AnyBuffer xg, ffi::AnyBuffer w_hh, ffi::AnyBuffer h0, ffi::AnyBuffer c0,
                       ffi::AnyBuffer lengths, ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> cs,
                       ffi::Result<ffi::AnyBuffer> acts, ffi::Result<ffi::AnyBuffer> h_n,
                       ffi::Result<ffi::AnyBuffer> c_n) {
  auto d = xg.dimensions();
  const int64_t T = d[0], B = d[1], H = d[2] / 4;
  const auto len_v = lengths_of(lengths);
  const int64_t* len = len_v.data();
  if (xg.element_type() == ffi::DataType::F32)
    rnnbench::lstm_forward<float>(T, B, H, ptr<float>(xg), ptr<float>(w_hh), ptr<float>(h0), ptr<float>(c0), len,
                                  ptr<float>(out), ptr<float>(cs), ptr<float>(acts), ptr<float>(h_n), ptr<float>(c_n));
  else if (xg.element_type() == ffi::DataType::F64)
    rnnbench::lstm_forward<double>(T, B, H, ptr<double>(xg), ptr<double>(w_hh), ptr<double>(h0), ptr<double>(c0),
                                   len, ptr<double>(out), ptr<double>(cs), ptr<double>(acts), ptr<double>(h_n),
                                   ptr<double>(c_n));
  else
    return ffi::Error::InvalidArgument("rnnbench fused LSTM: float32 or float64 only");
  return ffi::Error::Success();
}

ffi::Error LstmBackward(ffi::AnyBuffer w_hh, ffi::AnyBuffer c0, ffi::AnyBuffer lengths, ffi::AnyBuffer acts,
                        ffi::AnyBuffer cs, ffi::AnyBuffer dout, ffi::AnyBuffer dh_n, ffi::AnyBuffer dc_n,
                        ffi::Result<ffi::AnyBuffer> dgates, ffi::Result<ffi::AnyBuffer> dh0,
                        ffi::Result<ffi::AnyBuffer> dc0) {
  auto d = acts.dimensions();
  const int64_t T = d[0], B = d[1], H = d[2] / 4;
  const auto len_v = lengths_of(lengths);
  const int64_t* len = len_v.data();
  if (acts.element_type() == ffi::DataType::F32)
    rnnbench::lstm_backward<float>(T, B, H, ptr<float>(w_hh), ptr<float>(c0), len, ptr<float>(acts), ptr<float>(cs),
                                   ptr<float>(dout), ptr<float>(dh_n), ptr<float>(dc_n), ptr<float>(dgates),
                                   ptr<float>(dh0), ptr<float>(dc0));
  else if (acts.element_type() == ffi::DataType::F64)
    rnnbench::lstm_backward<double>(T, B, H, ptr<double>(w_hh), ptr<double>(c0), len, ptr<double>(acts),
                                    ptr<double>(cs), ptr<double>(dout), ptr<double>(dh_n), ptr<double>(dc_n),
                                    ptr<double>(dgates), ptr<double>(dh0), ptr<double>(dc0));
  else
    return ffi::Error::InvalidArgument("rnnbench fused LSTM: float32 or float64 only");
  return ffi::Error::Success();
}

ffi::Error GruForward(ffi::AnyBuffer xg, ffi::AnyBuffer w_hh, ffi::AnyBuffer b_hh, ffi::AnyBuffer h0,
                      ffi::AnyBuffer lengths, ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> acts,
                      ffi::Result<ffi::AnyBuffer> ghn, ffi::Result<ffi::AnyBuffer> h_n) {
  auto d = xg.dimensions();
  const int64_t T = d[0], B = d[1], H = d[2] / 3;
  const auto len_v = lengths_of(lengths);
  const int64_t* len = len_v.data();
  if (xg.element_type() == ffi::DataType::F32)
    rnnbench::gru_forward<float>(T, B, H, ptr<float>(xg), ptr<float>(w_hh), ptr<float>(b_hh), ptr<float>(h0), len,
                                 ptr<float>(out), ptr<float>(acts), ptr<float>(ghn), ptr<float>(h_n));
  else if (xg.element_type() == ffi::DataType::F64)
    rnnbench::gru_forward<double>(T, B, H, ptr<double>(xg), ptr<double>(w_hh), ptr<double>(b_hh), ptr<double>(h0),
                                  len, ptr<double>(out), ptr<double>(acts), ptr<double>(ghn), ptr<double>(h_n));
  else
    return ffi::Error::InvalidArgument("rnnbench fused GRU: float32 or float64 only");
  return ffi::Error::Success();
}

ffi::Error GruBackward(ffi::AnyBuffer w_hh, ffi::AnyBuffer h0, ffi::AnyBuffer lengths, ffi::AnyBuffer acts,
                       ffi::AnyBuffer ghn, ffi::AnyBuffer out, ffi::AnyBuffer dout, ffi::AnyBuffer dh_n,
                       ffi::Result<ffi::AnyBuffer> dgates_i, ffi::Result<ffi::AnyBuffer> dgates_h,
                       ffi::Result<ffi::AnyBuffer> dh0) {
  auto d = acts.dimensions();
  const int64_t T = d[0], B = d[1], H = d[2] / 3;
  const auto len_v = lengths_of(lengths);
  const int64_t* len = len_v.data();
  if (acts.element_type() == ffi::DataType::F32)
    rnnbench::gru_backward<float>(T, B, H, ptr<float>(w_hh), ptr<float>(h0), len, ptr<float>(acts), ptr<float>(ghn),
                                  ptr<float>(out), ptr<float>(dout), ptr<float>(dh_n), ptr<float>(dgates_i),
                                  ptr<float>(dgates_h), ptr<float>(dh0));
  else if (acts.element_type() == ffi::DataType::F64)
    rnnbench::gru_backward<double>(T, B, H, ptr<double>(w_hh), ptr<double>(h0), len, ptr<double>(acts),
                                   ptr<double>(ghn), ptr<double>(out), ptr<double>(dout), ptr<double>(dh_n),
                                   ptr<double>(dgates_i), ptr<double>(dgates_h), ptr<double>(dh0));
  else
    return ffi::Error::InvalidArgument("rnnbench fused GRU: float32 or float64 only");
  return ffi::Error::Success();
}

}  // namespace


XLA_FFI_DEFINE_HANDLER_SYMBOL(RnnbenchLstmForward, LstmForward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(RnnbenchLstmBackward, LstmBackward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(RnnbenchGruForward, GruForward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(RnnbenchGruBackward, GruBackward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>());
