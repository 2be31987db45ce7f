// Lower: Spec -> Units. Each wrap unit becomes one flat parameter: its
// tensors concatenated in layer order (tensor order within a layer as in
// dsl/Layers.h), each tensor starting on a kTensorAlignElems boundary, the
// whole padded so that it splits into shard_group equal shards, each a
// multiple of the shard alignment. Rank r of a shard group owns elements
// [r * shard_elems, (r + 1) * shard_elems) of the unsharded flat buffer.
// Tied weights exist once (the tied head owns no tensor). Two paddings, not
// to be confused: a tensor with one row per token is stored with the padded
// vocabulary's rows (ModelSpec::padded_vocab(), zero rows after the true ones:
// vocab padding), and each flat parameter is padded to split into equal
// aligned shards (shard padding).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsl/Layers.h"
#include "dsl/Spec.h"
#include "runtime/model/layout.h"

namespace fsdpgen {

using model::kTensorAlignElems;  // runtime/model/layout.h

struct FlatTensor {
  std::string name;            // Hugging Face name
  std::vector<int64_t> shape;  // global shape, as Hugging Face files have it
  int64_t offset_elems = 0;    // in the unsharded flat buffer
  int64_t elems = 0;           // of shape
  int64_t stored_elems = 0;    // in the flat buffer: elems, then zero vocab-padding rows
};

// One contiguous run of a unit's layers in forward order; a unit whose layers
// are split in forward order (the root: embed ... final_norm, head) has
// several. A block that sub-block units split appears as its pieces. Compute
// ops are per segment.
//
// Segments that share a block (one ends with some of its pieces, the next
// begins with the rest) form a group, named by its first segment: the
// group's layers save into one buffer (the block's slot once), and under
// recompute = block the group keeps only its first layer's input and
// rebuilds the rest together before the backward of its last segment.
struct Segment {
  int unit = 0;
  std::vector<LayerId> layers;
  bool has_loss = false;  // the segment that ends with the head computes the loss
  int group = 0;          // the first segment of its group (itself, unless it continues a block)
};

struct FlatUnit {
  int index = 0;  // 0 is the root
  std::string name;
  std::vector<LayerId> layers;
  std::vector<FlatTensor> tensors;
  int64_t param_elems = 0;          // real parameters
  int64_t vocab_padding_elems = 0;  // zero rows of its tensors' padded vocabulary
  int64_t padded_elems = 0;         // flat length: shard_elems * shard_group
  int64_t shard_elems = 0;          // per rank of the shard group
};

struct Units {
  Spec spec;
  std::vector<FlatUnit> units;            // [0] is the root
  std::vector<Segment> segments;          // forward order
  int64_t shard_align_elems = 0;          // shard alignment in param-dtype elements
  int64_t total_params = 0;               // real parameters of the model
  int64_t total_vocab_padding_elems = 0;  // zero rows of the padded vocabulary
  int64_t total_padded_elems = 0;         // sum of padded flat lengths

  // Every element of the flat parameters that is not a parameter: vocab
  // padding, alignment gaps between tensors and shard padding.
  int64_t padding_elems() const { return total_padded_elems - total_params; }
};

// Precondition: `spec` came from check() (units resolved, sizes in range).
Units lower(const Spec& spec);

// The segments of group g (Segment::group), in forward order.
std::vector<int> group_segments(const Units& u, int g);
// Whether a segment continues a block begun in the segment before it.
bool continues_block(const Segment& s);

// Replica groups for hybrid sharding and placement: the ranks of shard group
// g are [g * S, (g + 1) * S); replica group p holds the ranks at position p of
// every shard group. A group is intra-node when all its ranks share a node.
bool shard_group_intra_node(const ParallelSpec& p);
bool replica_group_intra_node(const ParallelSpec& p);

// ", N of them vocab padding (vocab V stored as Vp rows)", or "" without.
std::string vocab_padding_note(const Units& u);

std::string print_units(const Units& u);

}  // namespace fsdpgen
