#!/usr/bin/env python3
"""A Hugging Face model out of a run, loaded by transformers with no hand
work: a corpus prepared with a fixture BPE of 512 tokens (GPT-2's
vocab.json + merges.txt, and Llama 3's with its BOS), a gpt2, a llama and a
Qwen2 (llama with qkv_bias, tied), a Qwen3 (llama with qk_norm and a head_dim of
32 where width / heads is 16), a Mistral (llama with a sliding window of 8
in sequences of 32), an OLMo 2 (llama with block_norms = post and
qk_norm = across_heads), a Gemma (llama with its embedding scale, (1 + weight)
norms and GeGLU), a Gemma 2 (Gemma's with sandwich norms, alternating layers
with a window of 8, a query scalar of 24 and soft-caps) and a Gemma 3 (Gemma's
with sandwich norms, each head's q/k norms and alternating layers with a
rotary base of their own, the global ones' scaled linearly as in Gemma 3 4B) spec trained a few steps on it with `--save DIR`, and DIR loaded by
AutoModelForCausalLM and AutoTokenizer: the tokenizer encodes a document as
the token set holds it, the special-token ids are the set's, greedy
generation gives new tokens, and transformers' loss on the first batch
equals the run's first step from `--init-from DIR` (the reference tests'
batches, tools/reference_run.py). `fsdpgen merge` of the run's checkpoint
writes the same directory.
Usage: with_transformers.sh hf_out_test.py --fsdpgen FSDPGEN (exit 77,
skipped, without torch and transformers)."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
FSDPGEN = ""

CONTEXT, MICRO_BATCH = 32, 4
MODELS = {
    "gpt2": "family = gpt2\n  tie_embeddings = true",
    "llama": "family = llama\n  kv_heads = 1\n  ffn_hidden = 88\n  tie_embeddings = false",
    "qwen2": "family = llama\n  kv_heads = 1\n  ffn_hidden = 88\n  qkv_bias = true\n  tie_embeddings = true",
    "qwen3": "family = llama\n  kv_heads = 1\n  ffn_hidden = 88\n  qk_norm = true\n  head_dim = 32\n"
             "  tie_embeddings = true",
    "mistral": "family = llama\n  kv_heads = 1\n  ffn_hidden = 88\n  sliding_window = 8\n"
               "  tie_embeddings = false",
    "olmo2": "family = llama\n  kv_heads = 1\n  ffn_hidden = 88\n  qk_norm = across_heads\n"
             "  block_norms = post\n  tie_embeddings = false",
    "gemma": "family = llama\n  kv_heads = 1\n  ffn_hidden = 88\n  head_dim = 32\n"
             "  scale_embedding = true\n  norm_plus_one = true\n  activation = gelu_tanh\n"
             "  tie_embeddings = true",
    "gemma2": "family = llama\n  kv_heads = 1\n  ffn_hidden = 88\n  head_dim = 32\n"
              "  scale_embedding = true\n  norm_plus_one = true\n  activation = gelu_tanh\n"
              "  block_norms = sandwich\n  sliding_window = 8\n  global_every = 2\n"
              "  query_pre_attn_scalar = 24\n  attention_softcap = 20\n  logit_softcap = 10\n"
              "  tie_embeddings = true",
    "gemma3": "family = llama\n  kv_heads = 1\n  ffn_hidden = 88\n  head_dim = 32\n"
              "  scale_embedding = true\n  norm_plus_one = true\n  activation = gelu_tanh\n"
              "  block_norms = sandwich\n  qk_norm = true\n  sliding_window = 8\n"
              "  global_every = 2\n  rope_theta = 1000000\n  rope_local_theta = 10000\n"
              "  rope_scaling = linear(factor = 8)\n  tie_embeddings = true",
}
SPEC = """model hf_out_{family} {{
  {model}
  vocab   = 512
  context = {context}
  width   = 32
  heads   = 2
  layers  = 2
}}
units {{ each block }}
parallel {{
  world     = 1
  sharding  = full_shard
  precision {{ param = fp32  reduce = fp32  master = fp32 }}
}}
train {{
  optimizer   = adamw(lr = 3e-3, betas = (0.9, 0.95), eps = 1e-8, weight_decay = 0.0)
  micro_batch = {micro_batch}
  steps       = 6
  seed        = 1
  data        = tokens("data_{family}/train_*.bin")
  checkpoint(every = 6, dir = "ckpt_{family}", keep = 1)
  log_every   = 1
}}
"""


def read_tokens(path):
    with open(path, "rb") as f:
        magic, _, n = struct.unpack("<3i", f.read(12))
        f.seek(1024)
        return list(struct.unpack(f"<{n}{'H' if magic == 20240520 else 'I'}", f.read()))


def run(args, cwd, **env):
    r = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=dict(os.environ, **env))
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r.stdout + r.stderr


class HfOutTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not FSDPGEN:
            raise unittest.SkipTest("no --fsdpgen binary given")
        import prepare_fixture
        cls.dir = tempfile.mkdtemp(prefix="hf-out.")
        prepare_fixture.write_all(os.path.join(cls.dir, "fix"), 512)
        with open(os.path.join(cls.dir, "fix", "corpus.txt"), encoding="utf-8") as f:
            cls.docs = f.read().splitlines()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def trained(self, family, tokenizer):
        """Prepares the corpus with the fixture `tokenizer`, builds and trains
        the family's spec with --save out_FAMILY/; returns the directory."""
        d = self.dir
        run([FSDPGEN, "prepare", "fix/corpus.txt", "-o", f"data_{family}", "--tokenizer",
             f"fix/{tokenizer}", "--text-docs", "line", "--val-fraction", "0", "--quiet"], d,
            FSDPGEN_PYTHON=sys.executable, OMP_NUM_THREADS="1")
        with open(os.path.join(d, f"{family}.fsdp"), "w") as f:
            f.write(SPEC.format(family=family, model=MODELS[family], context=CONTEXT,
                                micro_batch=MICRO_BATCH))
        run([FSDPGEN, f"{family}.fsdp", "-o", f"train_{family}", "--target", "cpu"], d)
        out = run([f"./train_{family}", "--save", f"out_{family}/"], d)
        self.assertIn(f"tokenizer.json, tokenizer_config.json (the tokenizer of data_{family}/manifest.json)",
                      out)
        return os.path.join(d, f"out_{family}")

    def expect_loads_and_matches(self, family, tokenizer):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        out = self.trained(family, tokenizer)
        with open(os.path.join(self.dir, f"data_{family}", "manifest.json")) as f:
            manifest = json.load(f)["tokenizer"]
        eot = manifest["eot"]["id"]
        bos = manifest["bos"]["id"] if manifest["bos"] else None

        model = AutoModelForCausalLM.from_pretrained(out).eval()
        tok = AutoTokenizer.from_pretrained(out)
        self.assertEqual(model.config.model_type, {"gemma3": "gemma3_text"}.get(family, family))
        self.assertEqual((tok.eos_token_id, model.config.eos_token_id, model.generation_config.eos_token_id),
                         (eot, eot, eot))
        self.assertEqual(model.generation_config.pad_token_id, eot)
        self.assertEqual(tok.bos_token_id, bos if bos is not None else eot)
        self.assertEqual(tok.model_max_length, CONTEXT)

        # The first document as the set holds it: (BOS,) its tokens, EOT.
        stream = read_tokens(os.path.join(self.dir, f"data_{family}", "train_000000.bin"))
        first = stream[:stream.index(eot)]
        self.assertEqual(tok(self.docs[0]).input_ids, first, "AutoTokenizer encodes as the token set")
        self.assertEqual(tok.decode(first, skip_special_tokens=True), self.docs[0])

        prompt = tok("The river", return_tensors="pt")
        with torch.no_grad():
            ids = model.generate(**prompt, max_new_tokens=6, min_new_tokens=6, do_sample=False)
        self.assertEqual(ids.shape[1], prompt.input_ids.shape[1] + 6)
        self.assertTrue(tok.decode(ids[0], skip_special_tokens=True).startswith("The river"))

        # transformers' loss on the first batch (sequences 0..3: windows of
        # CONTEXT + 1 tokens, in file order) against the run's first step from these weights.
        run([f"./train_{family}", "--init-from", f"out_{family}", "--steps", "1", "--metrics",
             f"one_{family}.jsonl", "--checkpoint-every", "0", "--shuffle", "false"], self.dir)
        with open(os.path.join(self.dir, f"one_{family}.jsonl")) as f:
            run_loss = json.loads(f.readline())["loss"]
        batch = torch.tensor([stream[j * CONTEXT:j * CONTEXT + CONTEXT + 1] for j in range(MICRO_BATCH)])
        with torch.no_grad():
            logits = model(input_ids=batch[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                     batch[:, 1:].reshape(-1)).item()
        self.assertAlmostEqual(loss, run_loss, delta=1e-5 * abs(run_loss),
                               msg=f"transformers {loss:.9f}, the run {run_loss:.9f}")
        print(f"{family}: transformers' loss {loss:.9f}, the run's {run_loss:.9f}", file=sys.stderr)

        # merge writes the same directory from the checkpoint.
        run([FSDPGEN, "merge", f"ckpt_{family}", "-o", f"merged_{family}"], self.dir)
        merged = os.path.join(self.dir, f"merged_{family}")
        self.assertEqual(sorted(os.listdir(merged)), sorted(os.listdir(out)))
        for name in os.listdir(out):
            with open(os.path.join(out, name), "rb") as a, open(os.path.join(merged, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)

    def test_gpt2_from_vocab_and_merges(self):
        self.expect_loads_and_matches("gpt2", "gpt2-slow")

    def test_llama_with_bos(self):
        self.expect_loads_and_matches("llama", "llama3")

    def test_qwen2_with_bos(self):
        self.expect_loads_and_matches("qwen2", "llama3")

    def test_qwen3_with_bos(self):
        self.expect_loads_and_matches("qwen3", "llama3")

    def test_mistral_with_bos(self):
        self.expect_loads_and_matches("mistral", "llama3")

    def test_olmo2_with_bos(self):
        self.expect_loads_and_matches("olmo2", "llama3")

    def test_gemma_with_bos(self):
        self.expect_loads_and_matches("gemma", "llama3")

    def test_gemma2_with_bos(self):
        self.expect_loads_and_matches("gemma2", "llama3")

    def test_gemma3_with_bos(self):
        self.expect_loads_and_matches("gemma3", "llama3")


if __name__ == "__main__":
    if "--fsdpgen" in sys.argv:
        i = sys.argv.index("--fsdpgen")
        FSDPGEN = os.path.abspath(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    unittest.main()
