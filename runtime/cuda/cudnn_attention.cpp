// cudnn_attention (CUDA): the choice of attention kernels, and cuDNN's SDPA
// forward and backward graphs per shape (cuDNN frontend), run on g.stream.
#include "runtime/cuda/cudnn_attention.h"

#include <fmt/format.h>

#include <stdexcept>
#include <tuple>
#include <type_traits>

#include "runtime/dtype_pairs.h"

#if FSDPGEN_CUDNN
#include <cudnn_frontend.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <unordered_map>
#endif

attention_choice choose_attention(bool flash_plan, dtype_id param, int64_t head_size,
                                  int64_t context, float attention_softcap, bool cudnn_built,
                                  const char* forced) {
  const std::string f = forced ? forced : "";
  if (!f.empty() && f != "auto" && f != "flash" && f != "cudnn")
    throw std::runtime_error(
        fmt::format("FSDPGEN_ATTENTION={}: expected flash, cudnn or auto (or unset)", f));
  if (!flash_plan) {
    if (f == "cudnn")
      throw std::runtime_error(
          "FSDPGEN_ATTENTION=cudnn, but this plan saves the attention probabilities (head size " +
          std::to_string(head_size) + "), not the log-sum-exp cuDNN's fused attention saves");
    return {attention_kernels::materialized, "materialized probabilities (the plan's layout)"};
  }
  std::string why_not;
  if (f == "flash")
    why_not = "FSDPGEN_ATTENTION=flash";
  else if (!cudnn_built)
    why_not = "this build has no cuDNN (CMake's \"cuDNN:\" line says what it lacked)";
  else if (param == dtype_id::fp32)
    why_not = "params are fp32 (cuDNN's fused attention takes bf16 and fp16)";
  else if (head_size % kCudnnAttentionHeadSizeMultiple != 0 ||
           head_size > kCudnnAttentionMaxHeadSize)
    why_not = fmt::format("head size {} is not a multiple of {} up to {}", head_size,
                          kCudnnAttentionHeadSizeMultiple, kCudnnAttentionMaxHeadSize);
  else if (context == 1)
    why_not = "context 1 (cuDNN's fused attention refuses a single key)";
  else if (attention_softcap != 0.0f)
    why_not = fmt::format(
        "attention_softcap {} (cuDNN's SDPA takes a soft-cap only as a score modifier, which "
        "excludes its causal mask)",
        attention_softcap);
  if (why_not.empty()) return {attention_kernels::cudnn, "cuDNN fused attention"};
  if (f == "cudnn") throw std::runtime_error("FSDPGEN_ATTENTION=cudnn, but " + why_not);
  return {attention_kernels::flash, "flash kernels (not cuDNN: " + why_not + ")"};
}

bool cudnn_attention_shape::operator<(const cudnn_attention_shape& o) const {
  const int64_t a = H > 0 ? head_size() : hs, b = o.H > 0 ? o.head_size() : o.hs;
  return std::tie(B, T, C, H, KV, dtype, a, window, scale) <
         std::tie(o.B, o.T, o.C, o.H, o.KV, o.dtype, b, o.window, o.scale);
}

std::string cudnn_attention_shape::name() const {
  std::string options;
  if (hs != 0 && (H <= 0 || hs * H != C)) options += fmt::format(" hs={}", hs);
  if (window != 0) options += fmt::format(" window={}", window);
  if (scale != 0.0f) options += fmt::format(" scale={}", scale);
  return fmt::format("B={} T={} C={} H={}{} {}{}", B, T, C, H,
                     KV > 0 ? fmt::format(" KV={}", KV) : "", dtype_name(dtype), options);
}

#if FSDPGEN_CUDNN

namespace fe = cudnn_frontend;

namespace {

// Tensor ids in the variant packs.
enum tensor_uid : int64_t {
  q_uid = 1,
  k_uid,
  v_uid,
  o_uid,
  stats_uid,
  do_uid,
  dq_uid,
  dk_uid,
  dv_uid
};

struct graph_pair {
  std::shared_ptr<fe::graph::Graph> forward, backward;
  int64_t forward_workspace_bytes = 0, backward_workspace_bytes = 0;
  // Variant packs, keys inserted once: a step only updates their pointers.
  std::unordered_map<int64_t, void*> forward_pack, backward_pack;
};

void check_cudnn(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("{} failed: {}", call, cudnnGetErrorString(status)));
}

// Throws with the shape, the direction, the step and cuDNN's message.
void check_fe(const fe::error_t& e, const cudnn_attention_shape& s, const char* direction,
              const char* step) {
  if (!e.is_good())
    throw std::runtime_error(fmt::format("cuDNN attention {} for {}: {} failed: {}", direction,
                                         s.name(), step, e.err_msg));
}

std::shared_ptr<fe::graph::Graph> new_graph(const cudnn_attention_shape& s) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(s.dtype == dtype_id::fp16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// Lays t out as a (B, H, T, hs) view of the heads inside rows of `row_elems`
// per token (3C for q, k, v and their gradients; C for out and dout).
fe::graph::Tensor_attributes& head_layout(fe::graph::Tensor_attributes& t, int64_t uid,
                                          const cudnn_attention_shape& s, int64_t row_elems) {
  const int64_t hs = s.head_size();
  return t.set_uid(uid)
      .set_dim({s.B, s.H, s.T, hs})
      .set_stride({s.T * row_elems, hs, row_elems, 1});
}
// k's and v's (B, KV, T, hs) view in rows of KV * hs (grouped-query attention).
fe::graph::Tensor_attributes& kv_layout(fe::graph::Tensor_attributes& t, int64_t uid,
                                        const cudnn_attention_shape& s) {
  const int64_t hs = s.head_size(), row_elems = s.KV * hs;
  return t.set_uid(uid)
      .set_dim({s.B, s.KV, s.T, hs})
      .set_stride({s.T * row_elems, hs, row_elems, 1});
}
// A graph input laid out by head_layout.
std::shared_ptr<fe::graph::Tensor_attributes> heads_input(fe::graph::Graph& g, const char* name,
                                                          int64_t uid,
                                                          const cudnn_attention_shape& s,
                                                          int64_t row_elems) {
  fe::graph::Tensor_attributes t;
  return g.tensor(head_layout(t.set_name(name), uid, s, row_elems));
}
std::shared_ptr<fe::graph::Tensor_attributes> kv_input(fe::graph::Graph& g, const char* name,
                                                       int64_t uid,
                                                       const cudnn_attention_shape& s) {
  fe::graph::Tensor_attributes t;
  return g.tensor(kv_layout(t.set_name(name), uid, s));
}
// q, k and v: the thirds of each qkv row (packed), or with KV key/value heads
// arrays of their own (q rows C wide, k and v rows KV * hs).
std::array<std::shared_ptr<fe::graph::Tensor_attributes>, 3> qkv_inputs(
    fe::graph::Graph& g, const cudnn_attention_shape& s) {
  if (s.KV > 0)
    return {heads_input(g, "Q", q_uid, s, s.C), kv_input(g, "K", k_uid, s),
            kv_input(g, "V", v_uid, s)};
  return {heads_input(g, "Q", q_uid, s, 3 * s.C), heads_input(g, "K", k_uid, s, 3 * s.C),
          heads_input(g, "V", v_uid, s, 3 * s.C)};
}
void set_heads(fe::graph::Tensor_attributes& t, int64_t uid, const cudnn_attention_shape& s,
               int64_t row_elems) {
  head_layout(t.set_output(true), uid, s, row_elems);
}
// lse: (B, H, T) fp32, as (B, H, T, 1).
fe::graph::Tensor_attributes& lse_layout(fe::graph::Tensor_attributes& t,
                                         const cudnn_attention_shape& s) {
  return t.set_uid(stats_uid)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({s.B, s.H, s.T, 1})
      .set_stride({s.H * s.T, s.T, 1, 1});
}

// Validates, lowers, picks cuDNN's heuristic plan, checks it is supported
// and compiles it; returns the workspace it needs.
int64_t build(fe::graph::Graph& g, cudnnHandle_t handle, const cudnn_attention_shape& s,
              const char* direction) {
  check_fe(g.validate(), s, direction, "validate");
  check_fe(g.build_operation_graph(handle), s, direction, "build_operation_graph");
  check_fe(g.create_execution_plans({fe::HeurMode_t::A}), s, direction, "create_execution_plans");
  check_fe(g.check_support(), s, direction, "check_support");
  check_fe(g.build_plans(), s, direction, "build_plans");
  int64_t bytes = 0;
  check_fe(g.get_workspace_size(bytes), s, direction, "get_workspace_size");
  return bytes;
}

float attention_scale(const cudnn_attention_shape& s) {
  return s.scale > 0.0f ? s.scale : 1.0f / std::sqrt(static_cast<float>(s.head_size()));
}

// Query t attends keys u with t - u < window: the diagonal band's left bound
// (cudnn_frontend keeps u + W > t), beside the causal mask's right bound. A
// window of at least T is plain causal.
template <class A>
void set_window(A& options, const cudnn_attention_shape& s) {
  if (s.window > 0 && s.window < s.T) options.set_sliding_window_length(static_cast<int>(s.window));
}

std::shared_ptr<fe::graph::Graph> forward_graph(const cudnn_attention_shape& s) {
  auto g = new_graph(s);
  auto [q, k, v] = qkv_inputs(*g, s);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("attention_forward")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(attention_scale(s));
  set_window(options, s);
  auto [o, stats] = g->sdpa(q, k, v, options);
  set_heads(*o, o_uid, s, s.C);
  lse_layout(*stats, s).set_output(true);
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const cudnn_attention_shape& s) {
  auto g = new_graph(s);
  auto [q, k, v] = qkv_inputs(*g, s);
  auto o = heads_input(*g, "O", o_uid, s, s.C);
  auto d_o = heads_input(*g, "dO", do_uid, s, s.C);
  fe::graph::Tensor_attributes lse_attributes;
  auto stats = g->tensor(lse_layout(lse_attributes.set_name("Stats"), s));
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("attention_backward")
                     .set_causal_mask(true)
                     .set_attn_scale(attention_scale(s));
  set_window(options, s);
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, stats, options);
  if (s.KV > 0) {
    set_heads(*dq, dq_uid, s, s.C);
    kv_layout(dk->set_output(true), dk_uid, s);
    kv_layout(dv->set_output(true), dv_uid, s);
    return g;
  }
  set_heads(*dq, dq_uid, s, 3 * s.C);
  set_heads(*dk, dk_uid, s, 3 * s.C);
  set_heads(*dv, dv_uid, s, 3 * s.C);
  return g;
}

}  // namespace

struct gpu_attention {
  cudnnHandle_t handle = nullptr;
  std::map<cudnn_attention_shape, graph_pair> graphs;
};

bool cudnn_attention_built() {
  return true;
}

gpu_attention* gpu_attention_create() {
  auto a = std::make_unique<gpu_attention>();
  check_cudnn(cudnnCreate(&a->handle), "cudnnCreate");
  return a.release();
}

void gpu_attention_destroy(gpu_attention* a) {
  if (!a) return;
  a->graphs.clear();
  if (a->handle) cudnnDestroy(a->handle);
  delete a;
}

void gpu_attention_prepare(gpu_attention& a, const cudnn_attention_shape& s,
                           int64_t workspace_bytes) {
  if (a.graphs.count(s)) return;
  if (s.dtype == dtype_id::fp32 || s.H < 1 || s.head_size() < 1 || s.head_size() * s.H != s.C ||
      s.KV < 0 || (s.KV > 0 && s.H % s.KV != 0) || s.window < 0 || !(s.scale >= 0.0f) ||
      !std::isfinite(s.scale))
    throw std::runtime_error(
        fmt::format("cuDNN attention for {}: needs bf16 or fp16, a width of H heads of the head "
                    "size, key/value heads that divide them, a window of at least 0 and a finite "
                    "scale of at least 0",
                    s.name()));
  graph_pair p;
  p.forward = forward_graph(s);
  p.forward_workspace_bytes = build(*p.forward, a.handle, s, "forward");
  p.backward = backward_graph(s);
  p.backward_workspace_bytes = build(*p.backward, a.handle, s, "backward");
  const int64_t needed = std::max(p.forward_workspace_bytes, p.backward_workspace_bytes);
  if (needed > workspace_bytes)
    throw std::runtime_error(fmt::format(
        "cuDNN attention for {} needs a workspace of {} bytes (forward {}, backward {}), but the "
        "plan's workspace buffer holds {} bytes (codegen/planner/Activations.h's "
        "cudnn_attention_workspace_bytes underestimates it; FSDPGEN_ATTENTION=flash runs the "
        "hand-written kernels)",
        s.name(), needed, p.forward_workspace_bytes, p.backward_workspace_bytes, workspace_bytes));
  for (int64_t uid : {q_uid, k_uid, v_uid, o_uid, stats_uid})
    p.forward_pack[uid] = nullptr;
  for (int64_t uid : {q_uid, k_uid, v_uid, o_uid, do_uid, stats_uid, dq_uid, dk_uid, dv_uid})
    p.backward_pack[uid] = nullptr;
  a.graphs.emplace(s, std::move(p));
}

namespace {

// The graphs prepared for s (std::logic_error when none were).
template <class A>
auto& graphs_of(A* a, const cudnn_attention_shape& s) {
  if (!a) throw std::logic_error("cuDNN attention for " + s.name() + ": no gpu_attention in g");
  auto it = a->graphs.find(s);
  if (it == a->graphs.end())
    throw std::logic_error("cuDNN attention for " + s.name() +
                           ": no graphs were prepared for this shape before the step");
  return it->second;
}

void run(const fe::graph::Graph& graph, std::unordered_map<int64_t, void*>& pack,
         const gpu_attention& a, const cudnn_attention_shape& s, const char* direction,
         gpu_exec& g) {
  check_cudnn(cudnnSetStream(a.handle, g.stream), "cudnnSetStream");
  check_fe(graph.execute(a.handle, pack, g.lt_workspace), s, direction, "execute");
}

template <class T>
constexpr dtype_id dtype_of() {
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, fp16>);
  return std::is_same_v<T, fp16> ? dtype_id::fp16 : dtype_id::bf16;
}

template <class T>
void* ptr(const T* p) {
  return const_cast<T*>(p);
}

// The shape of grouped-query attention with options o; their softcap must be
// 0 (the graphs have none).
cudnn_attention_shape gqa_shape(int64_t B, int64_t T_, int64_t H, int64_t KV_heads, int64_t hs,
                                dtype_id dtype, const attention_options& o) {
  const cudnn_attention_shape s{B, T_, H * hs, H, dtype, KV_heads, hs, o.window, o.scale};
  if (o.softcap != 0.0f)
    throw std::invalid_argument(fmt::format(
        "cuDNN attention for {}: softcap {}, which its graphs have not (choose_attention picks the "
        "flash kernels for a soft-capped model)",
        s.name(), o.softcap));
  return s;
}

}  // namespace

int64_t gpu_attention_workspace_bytes(const gpu_attention& a, const cudnn_attention_shape& s) {
  const graph_pair& p = graphs_of(&a, s);
  return std::max(p.forward_workspace_bytes, p.backward_workspace_bytes);
}

template <class T>
void cuda_cudnn_attention_forward(T* out, float* lse, const T* qkv, int64_t B, int64_t T_,
                                  int64_t C, int64_t H, gpu_exec& g) {
  const cudnn_attention_shape s{B, T_, C, H, dtype_of<T>()};
  graph_pair& p = graphs_of(g.attention, s);
  auto& pack = p.forward_pack;
  pack[q_uid] = ptr(qkv);
  pack[k_uid] = ptr(qkv + C);
  pack[v_uid] = ptr(qkv + 2 * C);
  pack[o_uid] = out;
  pack[stats_uid] = lse;
  run(*p.forward, pack, *g.attention, s, "forward", g);
}

template <class T>
void cuda_cudnn_attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out,
                                   const float* lse, int64_t B, int64_t T_, int64_t C, int64_t H,
                                   gpu_exec& g) {
  const cudnn_attention_shape s{B, T_, C, H, dtype_of<T>()};
  graph_pair& p = graphs_of(g.attention, s);
  auto& pack = p.backward_pack;
  pack[q_uid] = ptr(qkv);
  pack[k_uid] = ptr(qkv + C);
  pack[v_uid] = ptr(qkv + 2 * C);
  pack[o_uid] = ptr(out);
  pack[do_uid] = ptr(dout);
  pack[stats_uid] = ptr(lse);
  pack[dq_uid] = dqkv;
  pack[dk_uid] = dqkv + C;
  pack[dv_uid] = dqkv + 2 * C;
  run(*p.backward, pack, *g.attention, s, "backward", g);
}

template <class T>
void cuda_cudnn_attention_gqa_forward(T* out, float* lse, const T* q, const T* k, const T* v,
                                      int64_t B, int64_t T_, int64_t H, int64_t KV_heads,
                                      int64_t hs, gpu_exec& g, const attention_options& o) {
  const cudnn_attention_shape s = gqa_shape(B, T_, H, KV_heads, hs, dtype_of<T>(), o);
  graph_pair& p = graphs_of(g.attention, s);
  auto& pack = p.forward_pack;
  pack[q_uid] = ptr(q);
  pack[k_uid] = ptr(k);
  pack[v_uid] = ptr(v);
  pack[o_uid] = out;
  pack[stats_uid] = lse;
  run(*p.forward, pack, *g.attention, s, "forward", g);
}

template <class T>
void cuda_cudnn_attention_gqa_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                                       const T* v, const T* out, const float* lse, int64_t B,
                                       int64_t T_, int64_t H, int64_t KV_heads, int64_t hs,
                                       gpu_exec& g, const attention_options& o) {
  const cudnn_attention_shape s = gqa_shape(B, T_, H, KV_heads, hs, dtype_of<T>(), o);
  graph_pair& p = graphs_of(g.attention, s);
  auto& pack = p.backward_pack;
  pack[q_uid] = ptr(q);
  pack[k_uid] = ptr(k);
  pack[v_uid] = ptr(v);
  pack[o_uid] = ptr(out);
  pack[do_uid] = ptr(dout);
  pack[stats_uid] = ptr(lse);
  pack[dq_uid] = dq;
  pack[dk_uid] = dk;
  pack[dv_uid] = dv;
  run(*p.backward, pack, *g.attention, s, "backward", g);
}

#else  // no cuDNN in this build: choose_attention never picks it

struct gpu_attention {};

bool cudnn_attention_built() {
  return false;
}

namespace {
[[noreturn]] void no_cudnn(const char* what) {
  throw std::logic_error(std::string(what) +
                         ": this build has no cuDNN (CMake's \"cuDNN:\" line says why)");
}
}  // namespace

gpu_attention* gpu_attention_create() {
  no_cudnn("gpu_attention_create");
}
void gpu_attention_destroy(gpu_attention* a) {
  delete a;
}
void gpu_attention_prepare(gpu_attention&, const cudnn_attention_shape&, int64_t) {
  no_cudnn("gpu_attention_prepare");
}
int64_t gpu_attention_workspace_bytes(const gpu_attention&, const cudnn_attention_shape&) {
  no_cudnn("gpu_attention_workspace_bytes");
}
template <class T>
void cuda_cudnn_attention_forward(T*, float*, const T*, int64_t, int64_t, int64_t, int64_t,
                                  gpu_exec&) {
  no_cudnn("cuda_cudnn_attention_forward");
}
template <class T>
void cuda_cudnn_attention_backward(T*, const T*, const T*, const T*, const float*, int64_t, int64_t,
                                   int64_t, int64_t, gpu_exec&) {
  no_cudnn("cuda_cudnn_attention_backward");
}
template <class T>
void cuda_cudnn_attention_gqa_forward(T*, float*, const T*, const T*, const T*, int64_t, int64_t,
                                      int64_t, int64_t, int64_t, gpu_exec&,
                                      const attention_options&) {
  no_cudnn("cuda_cudnn_attention_gqa_forward");
}
template <class T>
void cuda_cudnn_attention_gqa_backward(T*, T*, T*, const T*, const T*, const T*, const T*, const T*,
                                       const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                       gpu_exec&, const attention_options&) {
  no_cudnn("cuda_cudnn_attention_gqa_backward");
}

#endif

// cuDNN's fused attention takes the 16-bit types (runtime/dtype_pairs.h).
#define CUDNN_ATTENTION_INSTANTIATE(T)                                                           \
  template void cuda_cudnn_attention_forward<T>(T*, float*, const T*, int64_t, int64_t, int64_t, \
                                                int64_t, gpu_exec&);                             \
  template void cuda_cudnn_attention_backward<T>(T*, const T*, const T*, const T*, const float*, \
                                                 int64_t, int64_t, int64_t, int64_t, gpu_exec&); \
  template void cuda_cudnn_attention_gqa_forward<T>(T*, float*, const T*, const T*, const T*,    \
                                                    int64_t, int64_t, int64_t, int64_t, int64_t, \
                                                    gpu_exec&, const attention_options&);        \
  template void cuda_cudnn_attention_gqa_backward<T>(                                            \
      T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const float*, int64_t,       \
      int64_t, int64_t, int64_t, int64_t, gpu_exec&, const attention_options&);
FSDPGEN_FOR_EACH_HALF_DTYPE(CUDNN_ATTENTION_INSTANTIATE)
