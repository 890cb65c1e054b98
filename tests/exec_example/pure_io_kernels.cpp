// An opcase exec backend in C++: masked_im2col_forward, psamask_forward and psamask_backward
// (the pure-IO kernels), with the parameter checks of their design docs, in the docs' order.
//
// Build (from the repository root):
//   mkdir -p build && protoc -Igen/core/proto --cpp_out=build gen/core/proto/opcase.proto
//   g++ -O2 -std=c++17 -Ibuild tests/exec_example/pure_io_kernels.cpp build/opcase.pb.cc -lprotobuf -o build/pure_io_kernels
// Use:
//   opcase run cases --backend exec:build/pure_io_kernels
//
// The protocol (README "External implementations"):
//   pure_io_kernels --list-supported     print the supported kernels and dtypes, one kernel a line
//   pure_io_kernels REQUEST RESPONSE     read an opcase.Case from REQUEST (plain, no envelope; inputs
//                                        inline or in raw sidecar files beside it), write an
//                                        opcase.Response to RESPONSE, exit 0.  A call that breaks a
//                                        parameter check is answered with rejected = true.
// Anything else (a bad request, an I/O failure) is reported on stderr with exit status 2; the
// harness then counts the case as an error and quotes that output.

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "opcase.pb.h"

namespace {

// A tensor of the request: its description and raw little-endian C-order bytes.
struct Array {
  std::string name, dtype, layout;
  std::vector<int64_t> shape;
  std::string bytes;
  size_t ndim() const { return shape.size(); }
  int64_t dim(size_t i) const { return i < shape.size() ? shape[i] : -1; }
};

// A failure of the protocol itself (not a parameter check): stderr, exit status 2.
struct ProtocolError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A broken parameter check: the call is rejected with this message.
struct Rejected : std::runtime_error {
  using std::runtime_error::runtime_error;
};

size_t element_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"float16", 2}, {"float32", 4}, {"float64", 8}, {"int8", 1}, {"int16", 2},
      {"int32", 4},   {"int64", 8},   {"uint8", 1},   {"bool", 1}};
  auto it = sizes.find(dtype);
  if (it == sizes.end()) throw ProtocolError("unknown dtype " + dtype);
  return it->second;
}

int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ProtocolError("cannot open " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string directory_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// A request tensor's bytes: inline data, or the raw sidecar file beside the request.
Array read_tensor(const opcase::Tensor& t, const std::string& request_dir) {
  Array a{t.name(), t.dtype(), t.layout(), {t.shape().begin(), t.shape().end()}, {}};
  if (t.has_sidecar()) {
    a.bytes = read_file(request_dir + "/" + t.sidecar().path());
    if (a.bytes.size() != t.sidecar().length())
      throw ProtocolError("sidecar of " + a.name + " has the wrong length");
  } else {
    a.bytes = t.data();
  }
  if (a.bytes.size() != static_cast<size_t>(elements(a.shape)) * element_size(a.dtype))
    throw ProtocolError("tensor " + a.name + ": byte count does not match shape and dtype");
  return a;
}

// An output as requested: shape, dtype and layout from the request, bytes zero-filled.
Array make_output(const opcase::Tensor& t) {
  Array a{t.name(), t.dtype(), t.layout(), {t.shape().begin(), t.shape().end()}, {}};
  int64_t n = elements(a.shape);
  a.bytes.assign(n > 0 ? static_cast<size_t>(n) * element_size(a.dtype) : 0, '\0');
  return a;
}

struct Call {
  const opcase::Case& request;
  std::map<std::string, Array> inputs;
  std::map<std::string, Array> outputs;

  const Array& in(const std::string& name) const {
    auto it = inputs.find(name);
    if (it == inputs.end()) throw ProtocolError("request has no input " + name);
    return it->second;
  }
  Array& out(const std::string& name) {
    auto it = outputs.find(name);
    if (it == outputs.end()) throw ProtocolError("request asks for no output " + name);
    return it->second;
  }
  int64_t param(const std::string& name) const {
    auto it = request.params().find(name);
    if (it == request.params().end() || it->second.kind_case() != opcase::Value::kI)
      throw ProtocolError("request has no integer parameter " + name);
    return it->second.i();
  }
};

void require(bool ok, const char* check, const char* message) {
  if (!ok) throw Rejected(std::string(check) + ": " + message);
}

bool same_dims(const Array& a, const Array& b, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (a.dim(i) != b.dim(i)) return false;
  return true;
}

// ----------------------------------------------------------------------------- psamask

// Doc 001 section 3.4 and table 1.4, in order; `a` is x (forward) or dy (backward).
void psamask_checks(Call& c, const Array& a, const Array& b, bool forward) {
  int64_t psa_type = c.param("psa_type"), h_mask = c.param("h_mask"), w_mask = c.param("w_mask");
  require(psa_type == 0 || psa_type == 1, "psa_type_known", "psa_type must be 0 (COLLECT) or 1 (DISTRIBUTE)");
  require(a.dtype == b.dtype, "dtype_match", "input and output must have the same dtype");
  require(a.dtype == "float32", "dtype_float", "input and output must be float");
  require(a.layout == "NHWC" && b.layout == "NHWC", "layout_nhwc", "input and output must be NHWC");
  require(a.ndim() == 4 && b.ndim() == 4, "ndim_4", "input and output must be 4-D");
  require(same_dims(a, b, 3), "nhw_match", "input and output must agree in every dimension but C");
  const Array& mask_side = forward ? a : b;   // x (forward) or dx (backward): h_mask * w_mask channels
  const Array& map_side = forward ? b : a;    // y (forward) or dy (backward): H * W channels
  require(mask_side.dim(3) == h_mask * w_mask, forward ? "x_channels" : "dx_channels",
          "the mask side's channel count must equal h_mask * w_mask");
  require(map_side.dim(3) == map_side.dim(1) * map_side.dim(2), forward ? "y_channels" : "dy_channels",
          "the map side's channel count must equal h_feature * w_feature");
}

// For position (h, w) and mask entry (i, j): fh = h + i - (h_mask-1)/2, fw = w + j - (w_mask-1)/2;
// COLLECT pairs mask[n,h,w,i*wm+j] with map[n,h,w,fh*W+fw], DISTRIBUTE with map[n,fh,fw,h*W+w].
// Forward copies mask -> map, backward map -> mask; everything not paired stays 0.
void psamask(Call& c, bool forward) {
  const Array& a = c.in(forward ? "x" : "dy");
  Array& b = c.out(forward ? "y" : "dx");
  psamask_checks(c, a, b, forward);
  const int64_t psa_type = c.param("psa_type"), hm = c.param("h_mask"), wm = c.param("w_mask");
  const int64_t N = a.dim(0), H = a.dim(1), W = a.dim(2), half_h = (hm - 1) / 2, half_w = (wm - 1) / 2;
  const size_t es = element_size(a.dtype);
  const char* src = a.bytes.data();
  char* dst = &b.bytes[0];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        for (int64_t i = 0; i < hm; ++i) {
          const int64_t fh = h + i - half_h;
          if (fh < 0 || fh >= H) continue;
          for (int64_t j = 0; j < wm; ++j) {
            const int64_t fw = w + j - half_w;
            if (fw < 0 || fw >= W) continue;
            const int64_t mask_at = ((n * H + h) * W + w) * hm * wm + i * wm + j;
            const int64_t map_at = psa_type == 0 ? ((n * H + h) * W + w) * H * W + fh * W + fw
                                                 : ((n * H + fh) * W + fw) * H * W + h * W + w;
            if (forward)
              std::memcpy(dst + map_at * es, src + mask_at * es, es);
            else
              std::memcpy(dst + mask_at * es, src + map_at * es, es);
          }
        }
}

// ----------------------------------------------------------------------------- masked_im2col

// data_col[(c*kh + i)*kw + j, m] = feature[0, c, mask_h_idx[m] - pad_h + i, mask_w_idx[m] - pad_w + j],
// 0 outside the map.  Checks: doc 004 sections 1.1 and 1.4, in order.
void masked_im2col_forward(Call& c) {
  const Array& feature = c.in("feature");
  const Array& mh = c.in("mask_h_idx");
  const Array& mw = c.in("mask_w_idx");
  Array& col = c.out("data_col");
  const int64_t kh = c.param("kernel_h"), kw = c.param("kernel_w");
  const int64_t pad_h = c.param("pad_h"), pad_w = c.param("pad_w");
  require(feature.dtype == "float16" || feature.dtype == "float32", "dtype_float", "feature must be half or float");
  require(feature.dtype == col.dtype, "dtype_match", "feature and data_col must have the same dtype");
  require(mh.dtype == "int32" && mw.dtype == "int32", "index_dtype", "mask_h_idx and mask_w_idx must be int32");
  require(feature.layout == "NCHW", "layout_nchw", "feature must be NCHW");
  require(feature.ndim() == 4 && mh.ndim() == 1 && mw.ndim() == 1 && col.ndim() == 2, "ndims",
          "feature must be 4-D, mask_h_idx and mask_w_idx 1-D, data_col 2-D");
  require(feature.dim(0) == 1, "batch_one", "feature->dims[0] must be 1");
  require(col.dim(0) == feature.dim(1) * kh * kw, "data_col_rows",
          "data_col->dims[0] must equal channels * kernel_h * kernel_w");
  require(col.dim(1) == mh.dim(0) && mh.dim(0) == mw.dim(0), "mask_count",
          "data_col->dims[1], mask_h_idx->dims[0] and mask_w_idx->dims[0] must be equal");
  require(kh >= 1 && kw >= 1, "kernel_positive", "kernel_h and kernel_w must be positive");
  require(elements(feature.shape) > 0, "feature_nonempty", "feature must not have zero elements");
  require(col.dim(0) > 0, "data_col_rows_nonzero", "data_col's first dimension must not be 0");

  const int64_t C = feature.dim(1), H = feature.dim(2), W = feature.dim(3), M = mh.dim(0);
  const size_t es = element_size(feature.dtype);
  const char* src = feature.bytes.data();
  char* dst = &col.bytes[0];
  std::vector<int32_t> rows(M), cols(M);
  if (M > 0) {
    std::memcpy(rows.data(), mh.bytes.data(), M * sizeof(int32_t));   // little-endian hosts
    std::memcpy(cols.data(), mw.bytes.data(), M * sizeof(int32_t));
  }
  for (int64_t ch = 0; ch < C; ++ch)
    for (int64_t i = 0; i < kh; ++i)
      for (int64_t j = 0; j < kw; ++j) {
        const int64_t row = (ch * kh + i) * kw + j;
        for (int64_t m = 0; m < M; ++m) {
          const int64_t y = int64_t(rows[m]) - pad_h + i, x = int64_t(cols[m]) - pad_w + j;
          if (y < 0 || y >= H || x < 0 || x >= W) continue;
          std::memcpy(dst + (row * M + m) * es, src + ((ch * H + y) * W + x) * es, es);
        }
      }
}

void write_response(const opcase::Response& response, const std::string& path) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f || !response.SerializeToOstream(&f)) throw ProtocolError("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  GOOGLE_PROTOBUF_VERIFY_VERSION;
  if (argc == 2 && std::string(argv[1]) == "--list-supported") {
    std::cout << "masked_im2col_forward float16 float32\n"
                 "psamask_forward float32\n"
                 "psamask_backward float32\n";
    return 0;
  }
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " REQUEST RESPONSE | --list-supported\n";
    return 2;
  }
  try {
    opcase::Case request;
    if (!request.ParseFromString(read_file(argv[1]))) throw ProtocolError("request does not parse");
    Call call{request, {}, {}};
    const std::string dir = directory_of(argv[1]);
    for (const auto& t : request.inputs())
      if (!t.absent()) call.inputs.emplace(t.name(), read_tensor(t, dir));
    for (const auto& t : request.outputs()) call.outputs.emplace(t.name(), make_output(t));

    opcase::Response response;
    auto start = std::chrono::steady_clock::now();
    try {
      if (request.op() == "psamask_forward")
        psamask(call, true);
      else if (request.op() == "psamask_backward")
        psamask(call, false);
      else if (request.op() == "masked_im2col_forward")
        masked_im2col_forward(call);
      else
        throw ProtocolError("unsupported kernel " + request.op());
    } catch (const Rejected& r) {
      response.set_rejected(true);
      response.set_message(r.what());
      write_response(response, argv[2]);
      return 0;
    }
    std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
    response.set_kernel_seconds(seconds.count());
    for (const auto& t : request.outputs()) {   // in the request's order, echoing its description
      const Array& a = call.outputs.at(t.name());
      opcase::Tensor* out = response.add_outputs();
      out->set_name(a.name);
      for (int64_t s : a.shape) out->add_shape(s);
      out->set_dtype(a.dtype);
      out->set_layout(a.layout);
      out->set_data(a.bytes);
    }
    write_response(response, argv[2]);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << argv[0] << ": " << e.what() << "\n";
    return 2;
  }
}
