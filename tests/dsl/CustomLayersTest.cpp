// The spec's layers section (dsl/CustomLayers): every tests/layers/specs/NAME.fsdp
// renders NAME.err (good_* check clean), printing round-trips, a custom layer's
// tensors, pieces and units, and a layer reader that cannot run.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>

#include <gtest/gtest.h>

#include "dsl/CustomLayers.h"
#include "dsl/Layers.h"
#include "dsl/Print.h"
#include "dsl/layer_reader/ReadLayers.h"
#include "tests/common/Command.h"
#include "tests/common/TestName.h"
#include "tests/dsl/TestUtil.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

const char* const kSpecs = "tests/layers/specs";
const char* const kGelu = "../../../examples/layers/gelu_mlp.h";  // from kSpecs
const char* const kSwiGlu = "../../../examples/layers/swiglu_mlp.h";

// Sets an environment variable (unsets it for nullopt) until destroyed.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value->c_str(), 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Runs a test in `dir` of the source tree (the specs' directory by default, so
// that a spec's messages name it and its headers by the paths it writes) with
// the reader's cache in a fresh temporary directory; the cwd and the cache
// variable are restored after.
class InSpecsDir {
 public:
  explicit InSpecsDir(const std::string& dir = kSpecs)
      : cache_dir_(fs::path(testing::TempDir()) /
                   ("fsdpgen-custom-layers-cache-" + std::to_string(getpid()))),
        cache_("FSDPGEN_CACHE_DIR", cache_dir_.string()),
        cwd_(fs::current_path()) {
    fs::remove_all(cache_dir_);
    fs::current_path(source_dir() / dir);
  }
  ~InSpecsDir() {
    fs::current_path(cwd_);
    std::error_code ec;
    fs::remove_all(cache_dir_, ec);
  }

 private:
  fs::path cache_dir_;
  ScopedEnv cache_;
  fs::path cwd_;
};

bool reader_built() {
  return !layer_reader_path().empty();
}

#define SKIP_WITHOUT_READER()                                                    \
  if (!reader_built())                                                           \
  GTEST_SKIP() << "the layer reader (fsdpgen-layers) is not built: CMake found " \
                  "no Clang 19 ("                                                \
               << layers::reader_missing_message() << ")"

// A gpt2 model (width 64, ffn_hidden 256, 4 blocks) whose mlp is `mlp` of
// `header`, then `rest`; run InSpecsDir for the header's path to resolve.
std::string gpt2_with(const char* header, const std::string& mlp, const std::string& rest = "") {
  return with_model("layers { import = \"" + std::string(header) + "\"  mlp = " + mlp + " }\n" +
                    rest);
}

// ---------------------------------------------------------------------------
// Golden diagnostics

class CustomLayersGolden : public testing::TestWithParam<fs::path> {};

TEST_P(CustomLayersGolden, DiagnosticsMatch) {
  const fs::path& spec = GetParam();
  const std::string name = spec.filename().string();
  InSpecsDir here;
  FrontendResult r = load_spec_text(name, read_text(spec));
  if (r.diagnostics.find(layers::reader_missing_message()) != std::string::npos)
    GTEST_SKIP() << "the layer reader (fsdpgen-layers) is not built: "
                 << layers::reader_missing_message();
  fs::path golden = spec;
  golden.replace_extension(".err");
  if (name.rfind("good_", 0) == 0) {
    EXPECT_TRUE(r.spec.has_value()) << name << " must check:\n" << r.diagnostics;
    EXPECT_EQ(r.diagnostics, "") << name;
    EXPECT_FALSE(fs::exists(golden)) << "a good spec has no golden: " << golden;
    return;
  }
  EXPECT_FALSE(r.spec.has_value()) << name << " must fail";
  EXPECT_NE(r.diagnostics, "");
  if (std::getenv("FSDPGEN_UPDATE_GOLDEN")) {
    std::ofstream(golden, std::ios::binary) << r.diagnostics;
    return;
  }
  ASSERT_TRUE(fs::exists(golden)) << "missing golden " << golden
                                  << " (run with FSDPGEN_UPDATE_GOLDEN=1 and review it)";
  EXPECT_EQ(r.diagnostics, read_text(golden)) << "for " << spec;
}

INSTANTIATE_TEST_SUITE_P(Specs, CustomLayersGolden, testing::ValuesIn(files_in(kSpecs, ".fsdp")),
                         [](const auto& info) { return test_name_of(info.param.stem().string()); });

// Every error CustomLayers reports has a spec (the goldens are read, so this
// holds without the reader too), and goldens and specs pair up.
TEST(CustomLayerSpecs, CoverEveryErrorOfTheSection) {
  std::string all;
  for (const fs::path& err : files_in(kSpecs, ".err")) {
    fs::path spec = err;
    spec.replace_extension(".fsdp");
    EXPECT_TRUE(fs::exists(spec)) << "golden without a spec: " << err;
    all += read_text(err);
  }
  for (const fs::path& spec : files_in(kSpecs, ".fsdp")) {
    fs::path err = spec;
    err.replace_extension(".err");
    const bool good = spec.filename().string().rfind("good_", 0) == 0;
    EXPECT_TRUE(good || fs::exists(err)) << "a bad spec without a golden: " << spec;
  }
  for (const char* message : {
           "error: section 'layers' names no header",
           "error: 'import' names no file",
           "error: layer 'GeluMlp' in place of the blocks' 'mlp' has d_model = 128, but the "
           "model's width is 64",
           "error: '../custom/layer_norm.h' is imported twice",
           "error: layer 'LayerNorm' is declared in both '../custom/layer_norm.h' and "
           "'again/norms.h'",
           "error: '../custom/layer_norm.h' and 'again/layer_norm.h' have the same file name",
           "error: duplicate key 'import' in section 'layers'",
           "error: expected a string for 'import', got 'gelu_mlp'",
           "error: 'import' takes a file's path",
           "error: layer header 'gelu_mlp.h' does not exist",
           "note: a relative path is found from the spec's directory",
           "error: layer header '../../../examples/layers' is not a regular file",
           "error: unknown module 'mpl' of a gpt2 block; did you mean 'mlp'?",
           "error: 'mlp' takes a layer of the header",
           "error: no layer 'GeluMLP' in '../../../examples/layers/gelu_mlp.h'; did you mean "
           "'GeluMlp'?",
           "note: the header declares 'GeluMlp'",
           "error: a layer's hyper-parameters are given by name",
           "error: layer 'GeluMlp' has no hyper-parameter 'd_modle'; did you mean 'd_model'?",
           "error: hyper-parameter 'd_model' is given twice",
           "error: layer 'GeluMlp' needs a value for 'd_ff'",
           "error: layer 'GeluMlp' needs a value for 'd_model' and 'd_ff'",
           "error: unknown model value 'widht'; did you mean 'width'?",
           "error: 'd_ff' must be positive, got 0",
           "error: 'd_ff' must be at most 1,073,741,824, got 2000000000",
           "error: 'd_ff' must be an integer, got 2.5",
           "error: layer 'HalvedMlp', in_w's shape \"d_ff / 2\": 129 / 2 is not a whole number",
           "error: layer 'HalvedMlp', out_w's shape \"d_ff - d_model\" is 0, not at least 1",
           "error: cannot read the layers of '../bad/cpp_error.h'",
           "note: ../bad/cpp_error.h:15:51: error: expected ';' at end of declaration list",
           "note: ../bad/missing_include.h:2:10: fatal error: 'no_such_layer_api.h' file not found",
           "note: ../bad/bad_init.h:14:47: error: normal's standard deviation is -1, not a finite "
           "number of at least 0\n"
           "   14 |   fsdpgen::layer::Param<T, G, \"d_ff\", \"normal(-1)\"> b;\n",
           "error: duplicate key 'mlp' in section 'layers'",
       })
    EXPECT_NE(all.find(message), std::string::npos) << "no golden says: " << message;
}

// ---------------------------------------------------------------------------
// Printing

void expect_round_trip(const std::string& name, const std::string& text) {
  FrontendResult first = load_spec_text(name, text);
  ASSERT_TRUE(first.spec) << first.diagnostics;
  const std::string printed = print_spec(*first.spec);
  // The printed import is the path as the spec's directory resolved it: it
  // resolves again from this cwd when the printed spec has no directory.
  FrontendResult second = load_spec_text("printed.fsdp", printed);
  ASSERT_TRUE(second.spec) << second.diagnostics << "\n" << printed;
  EXPECT_TRUE(*first.spec == *second.spec) << name << " printed as:\n" << printed;
  EXPECT_EQ(print_spec(*second.spec), printed) << name;
  EXPECT_EQ(second.diagnostics, "") << name;
}

TEST(CustomLayers, PrintingAGoodSpecReadsBackEqual) {
  SKIP_WITHOUT_READER();
  for (const fs::path& spec : files_in(kSpecs, ".fsdp")) {
    if (spec.filename().string().rfind("good_", 0) != 0) continue;
    {
      InSpecsDir here;  // the spec by its file name: the import as it is written
      expect_round_trip(spec.filename().string(), read_text(spec));
    }
    InSpecsDir root(".");  // by a path from the source tree: the import found from its directory
    expect_round_trip((fs::path(kSpecs) / spec.filename()).string(), read_text(spec));
  }
}

TEST(CustomLayers, PrintedSectionNamesTheResolvedHeaderAndTheBoundValues) {
  SKIP_WITHOUT_READER();
  InSpecsDir root(".");
  FrontendResult r =
      load_spec_file((fs::path(kSpecs) / "good_gpt2_swiglu.fsdp").string());  // d_ff = 344
  ASSERT_TRUE(r.spec) << r.diagnostics;
  EXPECT_EQ(r.spec->model.layer_headers, std::vector<std::string>{"examples/layers/swiglu_mlp.h"});
  EXPECT_NE(print_spec(*r.spec).find("layers {\n"
                                     "  import = \"examples/layers/swiglu_mlp.h\"\n"
                                     "  mlp = SwiGluMlp(d_model = width, d_ff = 344)\n"
                                     "}\n"),
            std::string::npos)
      << print_spec(*r.spec);
}

// A section that imports a header but replaces no module checks the header
// and leaves the model without custom layers (nothing to print).
TEST(CustomLayers, AnImportAloneLeavesTheModelAsItIs) {
  SKIP_WITHOUT_READER();
  InSpecsDir here;
  const std::string text = with_model(std::string("layers { import = \"") + kGelu + "\" }");
  Spec s = load_ok(text);
  EXPECT_TRUE(s.model.custom.empty());
  EXPECT_TRUE(s.model.layer_headers.empty());
  EXPECT_EQ(print_spec(s).find("layers {"), std::string::npos) << print_spec(s);
  expect_round_trip("import_only.fsdp", text);
  // A header the reader rejects is still an error.
  EXPECT_NE(load_error(with_model("layers { import = \"../bad/cpp_error.h\" }"))
                .find("error: cannot read the layers of '../bad/cpp_error.h'"),
            std::string::npos);
}

// An import whose value did not parse is reported once, by the parser: the
// section is not also told that it names no header.
TEST(CustomLayers, AnImportThatDidNotParseIsNotAlsoMissing) {
  InSpecsDir here;
  const std::string said = load_error(
      with_model("layers {\n  import = ,\n  mlp = GeluMlp(d_model = width, d_ff = 256)\n}"));
  EXPECT_NE(said.find("error: unexpected ',', expected a value"), std::string::npos) << said;
  EXPECT_EQ(said.find("names no header"), std::string::npos) << said;
  EXPECT_NE(said.find("1 error generated."), std::string::npos) << said;
}

// ---------------------------------------------------------------------------
// Tensors and pieces

TEST(CustomLayers, GeluMlpHasTheBuiltInMlpsShapesUnderItsOwnNames) {
  SKIP_WITHOUT_READER();
  InSpecsDir here;
  const Spec builtin = load_ok(with_model(""));
  const Spec gelu = load_ok(gpt2_with(kGelu, "GeluMlp(d_model = width, d_ff = ffn_hidden)"));
  ASSERT_EQ(gelu.model.custom.size(), 1u);
  for (int64_t b : {0, 3}) {
    const LayerId block{LayerId::Kind::Block, b};
    const std::vector<TensorDecl> want = layer_tensors(builtin.model, block);
    const std::vector<TensorDecl> got = layer_tensors(gelu.model, block);
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(got.size(), 12u);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].shape, want[i].shape) << got[i].name << " for " << want[i].name;
      if (i < 8) {
        EXPECT_EQ(got[i].name, want[i].name);  // ln_1, attn, ln_2: the family's
      }
    }
    const std::string prefix = "transformer.h." + std::to_string(b) + ".mlp.";
    EXPECT_EQ(got[8].name, prefix + "fc_w");
    EXPECT_EQ(got[9].name, prefix + "fc_b");
    EXPECT_EQ(got[10].name, prefix + "proj_w");
    EXPECT_EQ(got[11].name, prefix + "proj_b");
    EXPECT_EQ(got[8].shape, (std::vector<int64_t>{64, 256}));
    EXPECT_EQ(layer_params(gelu.model, block), layer_params(builtin.model, block));
  }
  EXPECT_EQ(model_params(gelu.model), model_params(builtin.model));
  // The two mlp pieces (c_fc, c_proj) are one piece: the layer.
  EXPECT_EQ(block_piece_count(builtin.model), 6);
  ASSERT_EQ(block_piece_count(gelu.model), 5);
  const BlockPiece mlp = block_piece(gelu.model, 4);
  EXPECT_EQ(mlp.name, "mlp");
  EXPECT_EQ(mlp.custom, 0);
  EXPECT_EQ(mlp.first_tensor, 8);
  EXPECT_EQ(mlp.tensors, 4);
  EXPECT_EQ(mlp.family_first, 4);
  EXPECT_EQ(mlp.family_end, 6);
  EXPECT_TRUE(mlp.linear);
  EXPECT_EQ(mlp.forward_flops_per_token, 4.0 * 64 * 256);  // the header's Flops
  EXPECT_EQ(pieces_named(gelu.model, "mlp"), (std::vector<int>{4}));
  EXPECT_EQ(layer_name(gelu.model, {LayerId::Kind::Block, 2, 4}), "block 2.mlp");
}

// An init over a hyper-parameter bound to a model value: GPT-2's scaled
// projection, 0.02 / sqrt(2 * layers), evaluated in double when bound.
TEST(CustomLayers, InitExpressionsAreEvaluatedWithTheBoundValues) {
  SKIP_WITHOUT_READER();
  InSpecsDir here;
  const Spec s = load_ok(
      gpt2_with("scaled_mlp.h", "ScaledMlp(d_model = width, d_ff = ffn_hidden, n_layer = layers)"));
  ASSERT_EQ(s.model.custom.size(), 1u);
  const CustomLayerSpec& c = s.model.custom[0];
  ASSERT_EQ(c.params.size(), 2u);
  EXPECT_EQ(c.params[0].std, 0.02);
  EXPECT_EQ(c.params[1].std, 0.02 / std::sqrt(2.0 * static_cast<double>(s.model.layers)));
  EXPECT_EQ(s.model.layers, 4);
  // Bound to a number instead, the same expression gives that number's value.
  const Spec t = load_ok(
      gpt2_with("scaled_mlp.h", "ScaledMlp(d_model = width, d_ff = ffn_hidden, n_layer = 50)"));
  EXPECT_EQ(t.model.custom[0].params[1].std, 0.02 / std::sqrt(100.0));
}

TEST(CustomLayers, SwiGluMlpChangesTheParameterCountByItsOwnShapes) {
  SKIP_WITHOUT_READER();
  InSpecsDir here;
  const Spec builtin = load_ok(with_model(""));
  const Spec swiglu = load_ok(gpt2_with(kSwiGlu, "SwiGluMlp(d_model = width, d_ff = 344)"));
  ASSERT_EQ(swiglu.model.custom.size(), 1u);
  const CustomLayerSpec& c = swiglu.model.custom[0];
  EXPECT_EQ(c.module, "mlp");
  EXPECT_EQ(c.layer, "SwiGluMlp");
  EXPECT_EQ(c.hyper,
            (std::vector<CustomLayerSpec::Hyper>{{"d_model", 64, "width"}, {"d_ff", 344, ""}}));
  ASSERT_EQ(c.params.size(), 3u);
  EXPECT_EQ(c.params[0], (CustomTensorSpec{"gate_w",
                                           {344, 64},
                                           CustomTensorSpec::Init::Normal,
                                           0.02,
                                           CustomTensorSpec::Muon::OutIn}));
  EXPECT_EQ(c.params[1].shape, (std::vector<int64_t>{344, 64}));
  EXPECT_EQ(c.params[2].shape, (std::vector<int64_t>{64, 344}));
  EXPECT_EQ(c.saved, (std::vector<CustomArraySpec>{
                         {"gate", 344, false}, {"up", 344, false}, {"hidden", 344, false}}));
  EXPECT_EQ(c.scratch, (std::vector<CustomArraySpec>{{"dgate_up", 2 * 344, false}}));
  EXPECT_EQ(c.flops_per_token, 6 * 64 * 344);
  EXPECT_TRUE(c.cuda);  // swiglu_mlp.h declares forward_cuda and backward_cuda

  // By hand, C = 64, F = 256: the built-in block is 12 C^2 + 13 C = 49,984;
  // its mlp (c_fc C x F + F, c_proj F x C + C) is 2 x 64 x 256 + 256 + 64 =
  // 33,088; SwiGluMlp's three 64 x 344 matrices are 66,048.
  const LayerId block{LayerId::Kind::Block, 1};
  EXPECT_EQ(layer_params(builtin.model, block), 49984);
  EXPECT_EQ(layer_params(swiglu.model, block), 49984 - 33088 + 66048);
  EXPECT_EQ(layer_params(swiglu.model, {LayerId::Kind::Block, 1, 4}), 66048);
  EXPECT_EQ(model_params(swiglu.model), model_params(builtin.model) + 4 * (66048 - 33088));
  const std::vector<TensorDecl> t = layer_tensors(swiglu.model, block);
  ASSERT_EQ(t.size(), 8u + 3u);
  EXPECT_EQ(t[8].name, "transformer.h.1.mlp.gate_w");
  EXPECT_EQ(t[9].name, "transformer.h.1.mlp.up_w");
  EXPECT_EQ(t[10].name, "transformer.h.1.mlp.down_w");
}

// Llama's own mlp is SwiGLU in nn.Linear layout: the example layer has its
// shapes, named after the layer's members.
TEST(CustomLayers, SwiGluMlpInLlamaHasLlamasMlpShapes) {
  SKIP_WITHOUT_READER();
  InSpecsDir here;
  const std::string llama =
      "model l { family = llama vocab = 256 context = 64 width = 64 heads = 4 kv_heads = 2 "
      "ffn_hidden = 176 layers = 2 }\n";
  const Spec builtin = load_ok(llama);
  const Spec swiglu = load_ok(llama + "layers { import = \"" + kSwiGlu +
                              "\"  mlp = SwiGluMlp(d_model = width, d_ff = ffn_hidden) }\n");
  const LayerId block{LayerId::Kind::Block, 0};
  const std::vector<TensorDecl> want = layer_tensors(builtin.model, block);
  const std::vector<TensorDecl> got = layer_tensors(swiglu.model, block);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i].shape, want[i].shape) << got[i].name << " for " << want[i].name;
  EXPECT_EQ(want[6].name, "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(got[6].name, "model.layers.0.mlp.gate_w");
  EXPECT_EQ(got[8].name, "model.layers.0.mlp.down_w");
  EXPECT_EQ(model_params(swiglu.model), model_params(builtin.model));
  EXPECT_EQ(block_piece_count(swiglu.model), 7);  // the mlp's three pieces are one
}

// ---------------------------------------------------------------------------
// Units

// Block 0's units, each "name: piece, piece" by the pieces' names.
std::string block0_units(const Spec& s) {
  std::string out;
  for (const UnitSpec& u : s.units.units) {
    std::string layers;
    for (const LayerId& l : u.layers)
      if (l.kind == LayerId::Kind::Block && l.block == 0)
        layers += (layers.empty() ? "" : ", ") + layer_name(s.model, l);
    if (!layers.empty()) out += (out.empty() ? "" : " | ") + u.name + ": " + layers;
  }
  return out;
}

int64_t params_in_units(const Spec& s) {
  int64_t n = 0;
  for (const UnitSpec& u : s.units.units)
    for (const LayerId& l : u.layers)
      n += layer_params(s.model, l);
  return n;
}

TEST(CustomLayers, EachLinearGivesTheLayerAUnit) {
  SKIP_WITHOUT_READER();
  InSpecsDir here;
  const std::string gelu = "GeluMlp(d_model = width, d_ff = ffn_hidden)";
  // ln_2 joins the linear after it, as it joins the built-in mlp.c_fc.
  const Spec each = load_ok(gpt2_with(kGelu, gelu, "units { each linear }"));
  EXPECT_EQ(block0_units(each),
            "block0_ln_1_attn_c_attn: block 0.ln_1, block 0.attn.c_attn | block0_attn_c_proj: "
            "block 0.attn.c_proj | block0_ln_2_mlp: block 0.ln_2, block 0.mlp");
  EXPECT_EQ(params_in_units(each), model_params(each.model));
  // Named by its module: the layer alone, ln_2 joining the linear before it.
  const Spec named = load_ok(gpt2_with(kGelu, gelu, "units { unit m [block 0.mlp] each linear }"));
  EXPECT_EQ(block0_units(named),
            "block0_ln_1_attn_c_attn: block 0.ln_1, block 0.attn.c_attn | block0_attn_c_proj_ln_2: "
            "block 0.attn.c_proj, block 0.ln_2 | m: block 0.mlp");
  const Spec unnamed = load_ok(gpt2_with(kGelu, gelu, "units { unit [block 0.mlp] }"));
  EXPECT_NE(block0_units(unnamed).find("block0_mlp: block 0.mlp"), std::string::npos)
      << block0_units(unnamed);
  EXPECT_EQ(params_in_units(unnamed), model_params(unnamed.model));
  // The pieces it replaced are gone: a unit names the layer whole.
  const std::string said =
      load_error(gpt2_with(kGelu, gelu, "units { unit [block 0.mlp.c_fc] each block }"));
  EXPECT_NE(said.find("'mlp.c_fc'"), std::string::npos) << said;
  EXPECT_NE(said.find("did you mean 'mlp'?"), std::string::npos) << said;
}

// ---------------------------------------------------------------------------
// The reader

TEST(CustomLayers, AReaderThatCannotRunIsOneNote) {
  InSpecsDir here;
  ScopedEnv reader("FSDPGEN_LAYER_READER", "/nonexistent/fsdpgen-layers");
  FrontendResult r = load_spec_text("good_gpt2_gelu.fsdp", read_text("good_gpt2_gelu.fsdp"));
  EXPECT_FALSE(r.spec);
  EXPECT_EQ(r.diagnostics,
            "good_gpt2_gelu.fsdp:12:12: error: cannot read the layers of "
            "'../../../examples/layers/gelu_mlp.h'\n"
            "  import = \"../../../examples/layers/gelu_mlp.h\"\n"
            "           ^~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\n"
            "note: cannot run the layer reader /nonexistent/fsdpgen-layers\n"
            "1 error generated.\n");
}

// A reader that dies without a word still gets a note that says how.
TEST(CustomLayers, AReaderThatDiesSilentlyIsNamed) {
  InSpecsDir here;
  const fs::path fake = fs::path(testing::TempDir()) / "fsdpgen-layers-that-dies";
  std::ofstream(fake) << "#!/bin/sh\n[ \"$1\" = --version ] && echo 'fake reader 1' && exit 0\n"
                         "kill -SEGV $$\n";
  fs::permissions(fake, fs::perms::owner_all);
  ScopedEnv reader("FSDPGEN_LAYER_READER", fake.string());
  const std::string said = load_error(gpt2_with(kGelu, "GeluMlp(d_model = width, d_ff = 256)"));
  EXPECT_NE(said.find("note: the layer reader " + fake.string() +
                      " was killed by signal 11 (Segmentation fault) reading "),
            std::string::npos)
      << said;
  fs::remove(fake);
}

// Where no reader was built (no Clang 19) and none is named, the note is the
// one line saying how to install it. A build with a reader cannot un-build it:
// there the line is checked by layers_tests (ReadLayers' read_layers("")).
TEST(CustomLayers, WithoutAReaderTheNoteSaysHowToInstallOne) {
  InSpecsDir here;
  ScopedEnv reader("FSDPGEN_LAYER_READER", std::nullopt);
  if (reader_built())
    GTEST_SKIP() << "this build has a layer reader (" << layer_reader_path()
                 << "): the note for none is shown where Clang 19 is missing";
  const std::string said = load_error(gpt2_with(kGelu, "GeluMlp(d_model = width, d_ff = 256)"));
  EXPECT_NE(said.find("note: " + layers::reader_missing_message() + "\n"), std::string::npos)
      << said;
}

// ---------------------------------------------------------------------------
// The command line

TEST(CustomLayers, CheckAcceptsTheExampleSpecsAndDumpsTheirLayers) {
  SKIP_WITHOUT_READER();
  InSpecsDir here;  // for FSDPGEN_CACHE_DIR, which fsdpgen inherits
  for (const fs::path& f : files_in("examples/layers", ".fsdp")) {
    CmdResult r = run("check " + f.string());
    EXPECT_EQ(r.status, 0) << f << "\n" << r.out;
    EXPECT_NE(r.out.find(": ok: model"), std::string::npos) << r.out;
  }
  const fs::path spec = source_dir() / "examples/layers/gpt2-swiglu.fsdp";
  CmdResult r = run("check --dump " + spec.string());
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string header =
      (source_dir() / "examples/layers/swiglu_mlp.h").lexically_normal().string();
  const std::string cuda =
      (source_dir() / "examples/layers/swiglu_mlp.cu").lexically_normal().string();
  EXPECT_NE(r.out.find("layers {\n  import = \"" + header + "\"\n  cuda = \"" + cuda +
                       "\"\n  mlp = SwiGluMlp(d_model = width, d_ff = 344)\n}\n"),
            std::string::npos)
      << r.out;
  r = run("check " + (source_dir() / kSpecs / "unknown_hyper.fsdp").string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("unknown_hyper.fsdp:13:17: error: layer 'GeluMlp' has no hyper-parameter "
                       "'d_modle'; did you mean 'd_model'?"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace fsdpgen::test
