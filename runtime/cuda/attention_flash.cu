// attention_flash (CUDA): the flash attention kernels (see attention.h) of
// cuda_attention_forward_flash/backward_flash, on gpt2's packed qkv, and of
// cuda_attention_gqa_forward/backward, on llama's grouped-query q, k and v
// (with attention_options: a sliding window, a scale, soft-capped scores).
#include "runtime/cuda/attention.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "runtime/cuda/check.cuh"
#include "runtime/cuda/device.cuh"
#include "runtime/dtype_pairs.h"
#include "runtime/kernel_math.h"

namespace {

// Tiles of 32 queries and 32 keys: while scoring, a warp's lanes are a
// tile's 32 keys (forward, dq) or queries (dk, dv). A block has 4 warps and
// warp w owns the tile rows w, w + 4, ..., w + 28 (kFlashRows of them) of
// its accumulators, whose columns c = lane + 32 * ch (ch < kChunks, the head
// size's 32-column chunks) are the lane's.
constexpr int kFlashTile = 32;
constexpr int kFlashWarps = 4;
constexpr int kFlashThreads = kFlashWarps * kWarp;
constexpr int kFlashRows = kFlashTile / kFlashWarps;
constexpr int kFlashMaxChunks = static_cast<int>(kCudaAttentionFlashMaxHeadSize / kWarp);
static_assert(kFlashTile == kWarp, "a lane per key (or query) of a tile");
static_assert(kCudaAttentionFlashMaxHeadSize % kWarp == 0);
// Row stride of the (32, 32) probability tiles in shared memory: lanes
// writing one row and reading one column hit different banks.
constexpr int kPStride = kFlashTile + 1;
// Rows of delta per block of flash_delta_kernel, a warp per row.
constexpr int kDeltaRowsPerBlock = 8;
// Dynamic shared memory a block may use without opting in.
constexpr int kDefaultSharedBytes = 48 * 1024;

// The attention's shape as the flash kernels take it. Query head h of
// sequence b: position t's q at q + (b*T + t) * q_ld + h*hs, its k and v (kv
// head g = h / group) at k + (b*T + t) * kv_ld + g*hs and likewise in v, its
// out and dout at (b*T + t) * C + h*hs (C = H*hs), its lse and delta at
// (b*H + h) * T + t. gpt2's packed qkv is q, k, v at 0, C, 2C of rows 3C
// wide (group 1); llama's grouped-query q, k, v are arrays of their own.
// Shared-memory tiles of q, k, v, out or dout rows are fp32 (32, stride):
// stride = hs + 1, so that lanes reading one column of 32 different rows
// hit different banks (for even hs). Query t attends keys [first_key(t), t]
// (all before it, or with a window W the last W), as the CPU's flash_rows;
// their scores are score(q_t . k_u) = softcap_of(scale q_t . k_u, softcap).
struct flash_shape {
  int64_t T, C, H;
  int hs, stride;
  float scale;  // of q . k: 1/sqrt(hs) unless attention_options say otherwise
  int64_t q_ld, kv_ld, group;
  int64_t window = 0;    // 0: none
  float softcap = 0.0f;  // 0: none
  __host__ __device__ int64_t kv_heads() const { return H / group; }
  __host__ __device__ float score(float qk) const { return softcap_of(scale * qk, softcap); }
  __host__ __device__ int64_t first_key(int64_t t) const { return attention_first_key(t, window); }
  __host__ __device__ int64_t last_query(int64_t u) const {
    return attention_last_query(u, window, T);
  }
  // Whether query t (< T) attends key u.
  __host__ __device__ bool attends(int64_t t, int64_t u) const {
    return u <= t && u >= first_key(t);
  }
  // The first key tile a tile of queries from q0 reaches (the tiles before it
  // are wholly outside the window, as those after the diagonal are past it).
  __host__ __device__ int64_t first_key_tile(int64_t q0) const {
    return first_key(q0) / kFlashTile * kFlashTile;
  }
  // The end of the query tiles that reach the key tile from k0: T, or with a
  // window just past its last key's last query.
  __host__ __device__ int64_t query_tiles_end(int64_t k0) const {
    const int64_t last_key = k0 + kFlashTile < T ? k0 + kFlashTile - 1 : T - 1;
    return last_query(last_key) + 1;
  }
};

flash_shape flash_shape_of(int64_t T_, int64_t C, int64_t H, const char* what) {
  if (H <= 0 || C % H != 0)
    throw std::invalid_argument(std::string(what) + ": C=" + std::to_string(C) +
                                " is not a multiple of H=" + std::to_string(H));
  const int64_t hs = C / H;
  if (hs < 1 || hs > kCudaAttentionFlashMaxHeadSize)
    throw std::invalid_argument(std::string(what) + ": head size C/H = " + std::to_string(hs) +
                                " (C=" + std::to_string(C) + ", H=" + std::to_string(H) +
                                ") is not in [1, " +
                                std::to_string(kCudaAttentionFlashMaxHeadSize) +
                                "], what the fused kernels support; plan this model with "
                                "materialized attention");
  const int h = static_cast<int>(hs);
  return flash_shape{T_, C, H, h, h + 1, 1.0f / std::sqrt(static_cast<float>(hs)), 3 * C, 3 * C, 1};
}

// Grouped-query attention's shape: H query heads on KV_heads key/value heads
// of hs, with the options checked as the CPU's flash_rows_of checks them.
flash_shape gqa_shape_of(int64_t T_, int64_t H, int64_t KV_heads, int64_t hs,
                         const attention_options& o, const char* what) {
  if (o.window < 0)
    throw std::invalid_argument(std::string(what) + ": window " + std::to_string(o.window) +
                                " is negative (0: none)");
  if (!(o.scale >= 0.0f && o.softcap >= 0.0f && std::isfinite(o.scale) && std::isfinite(o.softcap)))
    throw std::invalid_argument(std::string(what) + ": scale " + std::to_string(o.scale) +
                                " or softcap " + std::to_string(o.softcap) +
                                " is negative or not finite (0: the default, none)");
  if (KV_heads <= 0 || H % KV_heads != 0)
    throw std::invalid_argument(std::string(what) + ": H=" + std::to_string(H) +
                                " query heads are not a multiple of " + std::to_string(KV_heads) +
                                " key/value heads");
  flash_shape s = flash_shape_of(T_, H * hs, H, what);
  s.q_ld = H * hs;
  s.kv_ld = KV_heads * hs;
  s.group = H / KV_heads;
  s.window = o.window;
  if (o.scale > 0.0f) s.scale = o.scale;
  s.softcap = o.softcap;
  return s;
}

// Bytes of a kernel's shared memory: `tiles` (32, stride) row tiles and
// `p_tiles` (32, kPStride) probability tiles, fp32.
int flash_shared_bytes(int stride, int tiles, int p_tiles) {
  return (tiles * kFlashTile * stride + p_tiles * kFlashTile * kPStride) *
         static_cast<int>(sizeof(float));
}

// dst (32, s.stride) = rows [r0, r0 + 32) of a head's matrix (row t at src +
// t * ld, columns [0, hs)) in fp32; rows at or past T are zeros. The whole
// block calls it.
template <class DT>
__device__ void load_tile(float* dst, const DT* src, int64_t ld, int64_t r0, const flash_shape& s) {
  for (int idx = threadIdx.x; idx < kFlashTile * s.hs; idx += blockDim.x) {
    const int i = idx / s.hs, c = idx % s.hs;
    dst[i * s.stride + c] = r0 + i < s.T ? to_float(src[(r0 + i) * ld + c]) : 0.0f;
  }
}

// acc[r][ch] (tile row w + 4r, column lane + 32ch) += sum over j < 32 of
// w_tile[row][j] * rows[j][column]: the accumulation step shared by the
// kernels (w_tile (32, kPStride) probabilities or score gradients, rows a
// (32, stride) tile).
template <int kChunks>
__device__ void accumulate_rows(float (&acc)[kFlashRows][kChunks], const float* w_tile,
                                const float* rows, int warp, int lane, const flash_shape& s) {
  for (int j = 0; j < kFlashTile; j++) {
    float x[kChunks];
#pragma unroll
    for (int ch = 0; ch < kChunks; ch++) {
      const int c = lane + kWarp * ch;
      x[ch] = c < s.hs ? rows[j * s.stride + c] : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < kFlashRows; r++) {
      const float w = w_tile[(warp + kFlashWarps * r) * kPStride + j];
#pragma unroll
      for (int ch = 0; ch < kChunks; ch++)
        acc[r][ch] += w * x[ch];
    }
  }
}

// Forward, block (head bh, query tile q0 = 32 * blockIdx.y). Shared: Q (the
// tile's queries), KV (a key tile's k, then its v), P (32, kPStride). For
// each key tile with a key in the window of one of the tile's queries:
// scores s.score(q.k) of row i (warp-owned) and key lane; masked ones (key
// after the query or before its window, or at or past T) are -inf; the
// online softmax rescales the row's sum and output by exp(old max - new
// max); P = exp(score - new max); out += P v.
template <class DT, int kChunks>
__global__ void __launch_bounds__(kFlashThreads)
    flash_forward_kernel(DT* out, float* lse, const DT* q, const DT* k, const DT* v,
                         flash_shape s) {
  extern __shared__ float smem[];
  float* Qs = smem;
  float* KVs = Qs + kFlashTile * s.stride;
  float* Ps = KVs + kFlashTile * s.stride;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t bh = blockIdx.x, b = bh / s.H, h = bh % s.H;
  const int64_t q0 = int64_t{blockIdx.y} * kFlashTile;
  const DT* q_src = q + b * s.T * s.q_ld + h * s.hs;
  const DT* k_src = k + b * s.T * s.kv_ld + h / s.group * s.hs;
  const DT* v_src = v + b * s.T * s.kv_ld + h / s.group * s.hs;
  load_tile(Qs, q_src, s.q_ld, q0, s);
  float m[kFlashRows], l[kFlashRows], acc[kFlashRows][kChunks];
#pragma unroll
  for (int r = 0; r < kFlashRows; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int ch = 0; ch < kChunks; ch++)
      acc[r][ch] = 0.0f;
  }
  const int64_t q_end = q0 + kFlashTile < s.T ? q0 + kFlashTile : s.T;  // queries [q0, q_end)
  for (int64_t k0 = s.first_key_tile(q0); k0 < q_end; k0 += kFlashTile) {
    __syncthreads();  // Q is loaded; the last key tile's readers of KV and P are done
    load_tile(KVs, k_src, s.kv_ld, k0, s);
    __syncthreads();
    float sc[kFlashRows] = {};
    for (int c = 0; c < s.hs; c++) {
      const float kc = KVs[lane * s.stride + c];
#pragma unroll
      for (int r = 0; r < kFlashRows; r++)
        sc[r] += Qs[(warp + kFlashWarps * r) * s.stride + c] * kc;
    }
    const int64_t key = k0 + lane;
    float alpha[kFlashRows];
#pragma unroll
    for (int r = 0; r < kFlashRows; r++) {
      const int row = warp + kFlashWarps * r;
      const float x = key < s.T && s.attends(q0 + row, key) ? s.score(sc[r]) : -INFINITY;
      const float m_new = fmaxf(m[r], warp_reduce(x, max_op{}));
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // no key yet: p and alpha are 0
      const float p = expf(x - base);
      alpha[r] = expf(m[r] - base);
      l[r] = l[r] * alpha[r] + warp_reduce(p, sum_op{});
      m[r] = m_new;
      Ps[row * kPStride + lane] = p;
    }
    __syncthreads();  // every warp is done reading k
    load_tile(KVs, v_src, s.kv_ld, k0, s);
    __syncthreads();  // v and P are in place
#pragma unroll
    for (int r = 0; r < kFlashRows; r++)
#pragma unroll
      for (int ch = 0; ch < kChunks; ch++)
        acc[r][ch] *= alpha[r];
    accumulate_rows(acc, Ps, KVs, warp, lane, s);
  }
#pragma unroll
  for (int r = 0; r < kFlashRows; r++) {
    const int64_t query = q0 + warp + kFlashWarps * r;
    if (query >= s.T) continue;
    const float inv = 1.0f / l[r];  // l >= 1: the row's max term is exp(0)
    DT* o = out + (b * s.T + query) * s.C + h * s.hs;
#pragma unroll
    for (int ch = 0; ch < kChunks; ch++) {
      const int c = lane + kWarp * ch;
      if (c < s.hs) o[c] = from_float<DT>(acc[r][ch] * inv);
    }
    if (lane == 0) lse[bh * s.T + query] = m[r] + logf(l[r]);
  }
}

// delta[r] = dout_t . out_t for row r = (bh, t) of (B, H, T): a warp per row.
template <class DT>
__global__ void flash_delta_kernel(float* delta, const DT* dout, const DT* out, int64_t rows,
                                   flash_shape s) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = blockIdx.x * int64_t{kDeltaRowsPerBlock} + threadIdx.x / kWarp;
  if (r >= rows) return;  // the whole warp
  const int64_t bh = r / s.T, t = r % s.T;
  const int64_t at = ((bh / s.H) * s.T + t) * s.C + (bh % s.H) * s.hs;
  float sum = 0.0f;
  for (int c = lane; c < s.hs; c += kWarp)
    sum += to_float(dout[at + c]) * to_float(out[at + c]);
  sum = warp_reduce(sum, sum_op{});
  if (lane == 0) delta[r] = sum;
}

// The probability and score gradient of query `query` and key `key`, from
// their dot products q.k (qk) and dout.v (dp): for the score c = s.score(qk),
// P = exp(c - lse) and the gradient of the score before the softcap dS = P
// (dp - delta) softcap_slope(c); both 0 unless query < T attends key.
struct flash_pair {
  float p, ds;
};
__device__ inline flash_pair flash_pair_of(float qk, float dp, float lse, float delta,
                                           int64_t query, int64_t key, const flash_shape& s) {
  const float c = s.score(qk);
  const float p = query < s.T && s.attends(query, key) ? expf(c - lse) : 0.0f;
  return flash_pair{p, p * (dp - delta) * softcap_slope(c, s.softcap)};
}

// dk and dv, block (kv head bg = b * kv_heads + g, key tile k0 = 32 *
// blockIdx.y). Shared: K, V (the tile's keys, loaded once), Q, dO (a query
// tile), P and dS (32, kPStride), indexed [key][query]. Over the query heads
// of the group in order, and over each one's query tiles from the diagonal
// on, up to the last that reaches the tile's keys (s.query_tiles_end):
// scores of key row j (warp-owned) and query lane; dv += P^T dout, dk += dS^T
// q; dk is scaled once at the end.
template <class DT, int kChunks>
__global__ void __launch_bounds__(kFlashThreads)
    flash_backward_dkdv_kernel(DT* dk_out, DT* dv_out, const DT* dout, const DT* q, const DT* k,
                               const DT* v, const float* lse, const float* delta, flash_shape s) {
  extern __shared__ float smem[];
  float* Ks = smem;
  float* Vs = Ks + kFlashTile * s.stride;
  float* Qs = Vs + kFlashTile * s.stride;
  float* dOs = Qs + kFlashTile * s.stride;
  float* Ps = dOs + kFlashTile * s.stride;
  float* dSs = Ps + kFlashTile * kPStride;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t bg = blockIdx.x, b = bg / s.kv_heads(), g = bg % s.kv_heads();
  const int64_t k0 = int64_t{blockIdx.y} * kFlashTile;
  load_tile(Ks, k + b * s.T * s.kv_ld + g * s.hs, s.kv_ld, k0, s);
  load_tile(Vs, v + b * s.T * s.kv_ld + g * s.hs, s.kv_ld, k0, s);
  float dk[kFlashRows][kChunks], dv[kFlashRows][kChunks];
#pragma unroll
  for (int r = 0; r < kFlashRows; r++)
#pragma unroll
    for (int ch = 0; ch < kChunks; ch++)
      dk[r][ch] = dv[r][ch] = 0.0f;
  for (int64_t h = g * s.group; h < (g + 1) * s.group; h++)
    for (int64_t q0 = k0; q0 < s.query_tiles_end(k0); q0 += kFlashTile) {
      const int64_t bh = b * s.H + h;
      const DT* q_src = q + b * s.T * s.q_ld + h * s.hs;
      const DT* o_src = dout + b * s.T * s.C + h * s.hs;
      __syncthreads();  // K and V are loaded; the last query tile's readers are done
      load_tile(Qs, q_src, s.q_ld, q0, s);
      load_tile(dOs, o_src, s.C, q0, s);
      __syncthreads();
      const int64_t query = q0 + lane;
      const float q_lse = query < s.T ? lse[bh * s.T + query] : 0.0f;
      const float q_delta = query < s.T ? delta[bh * s.T + query] : 0.0f;
      float qk[kFlashRows] = {}, dp[kFlashRows] = {};
      for (int c = 0; c < s.hs; c++) {
        const float q = Qs[lane * s.stride + c], o = dOs[lane * s.stride + c];
#pragma unroll
        for (int r = 0; r < kFlashRows; r++) {
          const int row = warp + kFlashWarps * r;
          qk[r] += Ks[row * s.stride + c] * q;
          dp[r] += Vs[row * s.stride + c] * o;
        }
      }
#pragma unroll
      for (int r = 0; r < kFlashRows; r++) {
        const int row = warp + kFlashWarps * r;
        const flash_pair pd = flash_pair_of(qk[r], dp[r], q_lse, q_delta, query, k0 + row, s);
        Ps[row * kPStride + lane] = pd.p;
        dSs[row * kPStride + lane] = pd.ds;
      }
      __syncthreads();  // P and dS are in place
      accumulate_rows(dv, Ps, dOs, warp, lane, s);
      accumulate_rows(dk, dSs, Qs, warp, lane, s);
    }
#pragma unroll
  for (int r = 0; r < kFlashRows; r++) {
    const int64_t key = k0 + warp + kFlashWarps * r;
    if (key >= s.T) continue;
    DT* dk_row = dk_out + (b * s.T + key) * s.kv_ld + g * s.hs;
    DT* dv_row = dv_out + (b * s.T + key) * s.kv_ld + g * s.hs;
#pragma unroll
    for (int ch = 0; ch < kChunks; ch++) {
      const int c = lane + kWarp * ch;
      if (c >= s.hs) continue;
      dk_row[c] = from_float<DT>(s.scale * dk[r][ch]);
      dv_row[c] = from_float<DT>(dv[r][ch]);
    }
  }
}

// dq, block (head bh, query tile q0 = 32 * blockIdx.y). Shared: Q, dO (the
// tile's queries, loaded once), K, V (a key tile), dS (32, kPStride)
// indexed [query][key]. Over the key tiles from the window's first
// (s.first_key_tile) up to the diagonal: scores of query row i (warp-owned)
// and key lane; dq += dS k, scaled once at the end.
template <class DT, int kChunks>
__global__ void __launch_bounds__(kFlashThreads)
    flash_backward_dq_kernel(DT* dq_out, const DT* dout, const DT* q, const DT* k, const DT* v,
                             const float* lse, const float* delta, flash_shape s) {
  extern __shared__ float smem[];
  float* Qs = smem;
  float* dOs = Qs + kFlashTile * s.stride;
  float* Ks = dOs + kFlashTile * s.stride;
  float* Vs = Ks + kFlashTile * s.stride;
  float* dSs = Vs + kFlashTile * s.stride;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t bh = blockIdx.x, b = bh / s.H, h = bh % s.H;
  const int64_t q0 = int64_t{blockIdx.y} * kFlashTile;
  const DT* k_src = k + b * s.T * s.kv_ld + h / s.group * s.hs;
  const DT* v_src = v + b * s.T * s.kv_ld + h / s.group * s.hs;
  load_tile(Qs, q + b * s.T * s.q_ld + h * s.hs, s.q_ld, q0, s);
  load_tile(dOs, dout + b * s.T * s.C + h * s.hs, s.C, q0, s);
  float row_lse[kFlashRows], row_delta[kFlashRows], dq[kFlashRows][kChunks];
#pragma unroll
  for (int r = 0; r < kFlashRows; r++) {
    const int64_t query = q0 + warp + kFlashWarps * r;
    row_lse[r] = query < s.T ? lse[bh * s.T + query] : 0.0f;
    row_delta[r] = query < s.T ? delta[bh * s.T + query] : 0.0f;
#pragma unroll
    for (int ch = 0; ch < kChunks; ch++)
      dq[r][ch] = 0.0f;
  }
  const int64_t q_end = q0 + kFlashTile < s.T ? q0 + kFlashTile : s.T;  // queries [q0, q_end)
  for (int64_t k0 = s.first_key_tile(q0); k0 < q_end; k0 += kFlashTile) {
    __syncthreads();  // Q and dO are loaded; the last key tile's readers are done
    load_tile(Ks, k_src, s.kv_ld, k0, s);
    load_tile(Vs, v_src, s.kv_ld, k0, s);
    __syncthreads();
    float qk[kFlashRows] = {}, dp[kFlashRows] = {};
    for (int c = 0; c < s.hs; c++) {
      const float kc = Ks[lane * s.stride + c], vc = Vs[lane * s.stride + c];
#pragma unroll
      for (int r = 0; r < kFlashRows; r++) {
        const int row = warp + kFlashWarps * r;
        qk[r] += Qs[row * s.stride + c] * kc;
        dp[r] += dOs[row * s.stride + c] * vc;
      }
    }
#pragma unroll
    for (int r = 0; r < kFlashRows; r++) {
      const int row = warp + kFlashWarps * r;
      dSs[row * kPStride + lane] =
          flash_pair_of(qk[r], dp[r], row_lse[r], row_delta[r], q0 + row, k0 + lane, s).ds;
    }
    __syncthreads();  // dS is in place
    accumulate_rows(dq, dSs, Ks, warp, lane, s);
  }
#pragma unroll
  for (int r = 0; r < kFlashRows; r++) {
    const int64_t query = q0 + warp + kFlashWarps * r;
    if (query >= s.T) continue;
    DT* dq_row = dq_out + (b * s.T + query) * s.q_ld + h * s.hs;
#pragma unroll
    for (int ch = 0; ch < kChunks; ch++) {
      const int c = lane + kWarp * ch;
      if (c < s.hs) dq_row[c] = from_float<DT>(s.scale * dq[r][ch]);
    }
  }
}

// Calls f(std::integral_constant<int, n>) for the head size's n 32-column
// chunks (1 to kFlashMaxChunks; flash_shape_of checked the head size).
template <class F>
void with_chunks(const flash_shape& s, F&& f) {
  static_assert(kFlashMaxChunks == 8, "one case per chunk count");
  switch (ceil_div(s.hs, kWarp)) {
    case 1:
      f(std::integral_constant<int, 1>{});
      break;
    case 2:
      f(std::integral_constant<int, 2>{});
      break;
    case 3:
      f(std::integral_constant<int, 3>{});
      break;
    case 4:
      f(std::integral_constant<int, 4>{});
      break;
    case 5:
      f(std::integral_constant<int, 5>{});
      break;
    case 6:
      f(std::integral_constant<int, 6>{});
      break;
    case 7:
      f(std::integral_constant<int, 7>{});
      break;
    default:
      f(std::integral_constant<int, 8>{});
      break;
  }
}

// kernel<<<(heads, tiles), kFlashThreads, bytes>>>(args...) on the stream,
// bytes for the kernel's `row_tiles` (32, s.stride) and `p_tiles` (32,
// kPStride) shared tiles. Above the default 48 KiB of dynamic shared memory
// (the backward's kernels at head sizes above 64: ~73 KiB at 128, ~137 KiB
// at 256, within the 163 KiB an A100's block may opt in to) a kernel
// must opt in: to what its largest head size (32 * kChunks) needs, the same
// value at every call. cudaFuncSetAttribute is not a stream operation, so a
// captured step may contain it.
template <int kChunks, class... P, class... A>
void launch_flash(void (*kernel)(P...), const flash_shape& s, int row_tiles, int p_tiles,
                  int64_t heads, int64_t tiles, cudaStream_t stream, A... args) {
  const int most = flash_shared_bytes(kWarp * kChunks + 1, row_tiles, p_tiles);
  if (most > kDefaultSharedBytes)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
  kernel<<<grid_dim(heads, tiles), kFlashThreads, flash_shared_bytes(s.stride, row_tiles, p_tiles),
           stream>>>(args...);
  CUDA_CHECK(cudaGetLastError());
}

// The flash forward and backward on q, k, v of `s`'s layout (packed or grouped-query).
template <class T>
void flash_forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B,
                   const flash_shape& s, gpu_exec& g) {
  if (B * s.T == 0) return;
  using DT = device_t<T>;
  with_chunks(s, [&](auto chunks) {
    constexpr int kChunks = decltype(chunks)::value;
    launch_flash<kChunks>(flash_forward_kernel<DT, kChunks>, s, 2, 1, B * s.H,
                          ceil_div(s.T, kFlashTile), g.stream, dev(out), lse, dev(q), dev(k),
                          dev(v), s);
  });
}

template <class T>
void flash_backward(T* dq, T* dk, T* dv, float* delta, const T* dout, const T* q, const T* k,
                    const T* v, const T* out, const float* lse, int64_t B, const flash_shape& s,
                    gpu_exec& g) {
  if (B * s.T == 0) return;
  using DT = device_t<T>;
  const int64_t rows = B * s.H * s.T, tiles = ceil_div(s.T, kFlashTile);
  flash_delta_kernel<<<grid_dim(ceil_div(rows, kDeltaRowsPerBlock)), kDeltaRowsPerBlock * kWarp, 0,
                       g.stream>>>(delta, dev(dout), dev(out), rows, s);
  CUDA_CHECK(cudaGetLastError());
  with_chunks(s, [&](auto chunks) {
    constexpr int kChunks = decltype(chunks)::value;
    const float* delta_in = delta;
    launch_flash<kChunks>(flash_backward_dkdv_kernel<DT, kChunks>, s, 4, 2, B * s.kv_heads(), tiles,
                          g.stream, dev(dk), dev(dv), dev(dout), dev(q), dev(k), dev(v), lse,
                          delta_in, s);
    launch_flash<kChunks>(flash_backward_dq_kernel<DT, kChunks>, s, 4, 1, B * s.H, tiles, g.stream,
                          dev(dq), dev(dout), dev(q), dev(k), dev(v), lse, delta_in, s);
  });
}

}  // namespace

template <class T>
void cuda_attention_forward_flash(T* out, float* lse, const T* qkv, int64_t B, int64_t T_,
                                  int64_t C, int64_t H, gpu_exec& g) {
  const flash_shape s = flash_shape_of(T_, C, H, "cuda_attention_forward_flash");
  flash_forward(out, lse, qkv, qkv + C, qkv + 2 * C, B, s, g);
}

template <class T>
void cuda_attention_backward_flash(T* dqkv, float* delta, const T* dout, const T* qkv, const T* out,
                                   const float* lse, int64_t B, int64_t T_, int64_t C, int64_t H,
                                   gpu_exec& g) {
  const flash_shape s = flash_shape_of(T_, C, H, "cuda_attention_backward_flash");
  flash_backward(dqkv, dqkv + C, dqkv + 2 * C, delta, dout, qkv, qkv + C, qkv + 2 * C, out, lse, B,
                 s, g);
}

template <class T>
void cuda_attention_gqa_forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B,
                                int64_t T_, int64_t H, int64_t KV_heads, int64_t hs, gpu_exec& g,
                                const attention_options& o) {
  flash_forward(out, lse, q, k, v, B,
                gqa_shape_of(T_, H, KV_heads, hs, o, "cuda_attention_gqa_forward"), g);
}

template <class T>
void cuda_attention_gqa_backward(T* dq, T* dk, T* dv, float* delta, const T* dout, const T* q,
                                 const T* k, const T* v, const T* out, const float* lse, int64_t B,
                                 int64_t T_, int64_t H, int64_t KV_heads, int64_t hs, gpu_exec& g,
                                 const attention_options& o) {
  flash_backward(dq, dk, dv, delta, dout, q, k, v, out, lse, B,
                 gqa_shape_of(T_, H, KV_heads, hs, o, "cuda_attention_gqa_backward"), g);
}

#define CUDA_ATTENTION_FLASH_INSTANTIATE(T)                                                        \
  template void cuda_attention_forward_flash<T>(T*, float*, const T*, int64_t, int64_t, int64_t,   \
                                                int64_t, gpu_exec&);                               \
  template void cuda_attention_backward_flash<T>(T*, float*, const T*, const T*, const T*,         \
                                                 const float*, int64_t, int64_t, int64_t, int64_t, \
                                                 gpu_exec&);                                       \
  template void cuda_attention_gqa_forward<T>(T*, float*, const T*, const T*, const T*, int64_t,   \
                                              int64_t, int64_t, int64_t, int64_t, gpu_exec&,       \
                                              const attention_options&);                           \
  template void cuda_attention_gqa_backward<T>(                                                    \
      T*, T*, T*, float*, const T*, const T*, const T*, const T*, const T*, const float*, int64_t, \
      int64_t, int64_t, int64_t, int64_t, gpu_exec&, const attention_options&);
FSDPGEN_FOR_EACH_DTYPE(CUDA_ATTENTION_FLASH_INSTANTIATE)
