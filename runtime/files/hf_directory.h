// hf_directory: a Hugging Face model directory as transformers'
// save_pretrained writes one, the one writer behind the training binary's
// `--save DIR` and `fsdpgen merge CKPT -o DIR`: the weights (model.safetensors,
// or model-0000k-of-0000n.safetensors with model.safetensors.index.json above
// a size), config.json with the tokenizer's special-token ids,
// generation_config.json, and the token set's tokenizer.json and
// tokenizer_config.json, so that AutoModelForCausalLM and AutoTokenizer load
// it with no hand work. Written as DIR.partial and renamed when complete.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/files/hf_config.h"
#include "runtime/files/safetensors.h"
#include "runtime/files/token_manifest.h"

// Whether an output path names a model directory: every path but one that
// ends in ".safetensors", which names one safetensors file. The one rule of
// --save and merge -o.
bool hf_output_is_directory(const std::string& path);

// transformers' save_pretrained default max_shard_size, "5GB".
inline constexpr int64_t kHfMaxShardBytes = 5'000'000'000;

// One safetensors file of a model directory.
struct hf_weight_file {
  std::string name;             // model.safetensors or model-0000k-of-0000n.safetensors
  std::vector<size_t> entries;  // the entries it holds, in order (indices of those given)
  safetensors_layout layout;    // its tensors in that order
};

// The entries, in order, in files of at most max_shard_bytes of tensor data
// each (a larger tensor alone in its own), as save_pretrained fills them;
// one model.safetensors when they all fit. Every file has `metadata`.
std::vector<hf_weight_file> hf_weight_files(const std::vector<safetensors_entry>& entries,
                                            const std::string& dtype,
                                            const std::map<std::string, std::string>& metadata,
                                            int64_t max_shard_bytes);

// What a model directory holds besides its weights.
struct hf_directory_files {
  std::string config_json;             // config.json's text
  std::string generation_config_json;  // generation_config.json's text
  std::string tokenizer_json;          // the tokenizer.json copied in; "" none
  std::string tokenizer_config_json;   // tokenizer_config.json's text; "" none
  hf_special_ids ids;                  // the ids both configs hold
  std::string ids_from;                // the manifest they and the tokenizer come from; "" none
};

// The files of model m's directory, its weights in `dtype` ("F32", "BF16",
// "F16"). With the token set's tokenizer t: eos and pad its end-of-text
// token, bos its BOS or else the end-of-text token (what precedes each
// document in the stream), its tokenizer.json, and its tokenizer_config.json
// (else one naming PreTrainedTokenizerFast and those tokens) with
// model_max_length the model's context. Without: hf_special_ids_by_vocab and
// no tokenizer. An id not below the model's vocab throws std::runtime_error
// naming the manifest.
hf_directory_files hf_directory_files_of(const hf_model& m,
                                         const std::optional<token_set_tokenizer>& t,
                                         const std::string& dtype);

// What the directory got besides its weights, for the log: "config.json
// (bos 511, eos 511), generation_config.json, tokenizer.json,
// tokenizer_config.json (the tokenizer of data/manifest.json)".
std::string hf_directory_describe(const hf_directory_files& f);

// `dir` without trailing slashes ("out/" is "out").
std::string hf_directory_path(const std::string& dir);

// Why a model directory cannot be written at `dir` ("" when it can): it is
// a file or a FIFO, it holds a file a model directory does not (only an
// empty directory or one this writer wrote is replaced), the directory it
// would be in is missing or no file can be created there.
std::string hf_directory_problem(const std::string& dir);

// Creates dir.partial afresh (removing one a failed write left) and returns it.
std::string hf_directory_begin(const std::string& dir);
// Writes the weights' index (when there are several files) and `f` into partial.
void hf_directory_write_files(const std::string& partial,
                              const std::vector<hf_weight_file>& weights,
                              const hf_directory_files& f);
// Renames dir.partial to dir, replacing the model directory (or empty
// directory) there: swapped atomically where the file system can.
void hf_directory_finish(const std::string& dir);
// Removes dir.partial (a write that failed).
void hf_directory_abandon(const std::string& dir);
