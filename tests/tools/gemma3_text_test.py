#!/usr/bin/env python3
"""tools/gemma3_text.py on a small random Gemma3ForConditionalGeneration
(a vision tower of one layer; a text model of 2 layers, one local with a
window of 8, one global with linear rope scaling of factor 8, as Gemma 3
4B's): fsdpgen refuses the checkpoint by name and points at the tool; the
tool's directory imports (`rope_scaling = linear(factor = 8)`), checks
against its config, and `fsdpgen sample` generates from it greedily the ids
transformers' generate gives the whole checkpoint. A second run into the
same directory, and a text model given as the source, are refused.
Usage: with_transformers.sh gemma3_text_test.py --fsdpgen FSDPGEN (exit 77,
skipped, without torch and transformers)."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TOOL = os.path.join(ROOT, "tools", "gemma3_text.py")
FSDPGEN = ""
PROMPT, NEW_TOKENS = [5, 17, 42, 9], 12


def run(*cmd):
    return subprocess.run(list(cmd), capture_output=True, text=True)


class Gemma3TextTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch
        import transformers
        cls.dir = tempfile.mkdtemp(prefix="gemma3_text_")
        torch.manual_seed(2)
        text = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                    max_position_embeddings=64, sliding_window=8, layer_types=[
                        "sliding_attention", "full_attention"],
                    rope_parameters={
                        "full_attention": {"rope_type": "linear", "factor": 8.0,
                                           "rope_theta": 1000000.0},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
                    initializer_range=0.3, bos_token_id=None, eos_token_id=None,
                    pad_token_id=None)
        vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, image_size=28, patch_size=14)
        config = transformers.Gemma3Config(text_config=text, vision_config=vision,
                                           mm_tokens_per_image=4, initializer_range=0.3)
        model = transformers.Gemma3ForConditionalGeneration(config).float().eval()
        # Norm weights off 0, and the norms after each sub-block scaling by
        # about 3 (1 + weight), so that the blocks' outputs, not the scaled
        # embedding of the last id alone, pick the next id: greedy ids vary.
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 1:
                    p.add_(0.1 * torch.randn(p.shape))
            for name, p in model.named_parameters():
                if "post_" in name and "layernorm" in name:
                    p.add_(2.0)
        cls.full = os.path.join(cls.dir, "full")
        model.save_pretrained(cls.full)
        prompt = torch.tensor([PROMPT])
        with torch.no_grad():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                 max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                 pad_token_id=0, eos_token_id=None)
            # The smallest gap between the two largest logits along the greedy
            # path (0.045): fp32 differences far below it cannot change an id.
            top2 = torch.topk(model(out).logits[0, len(PROMPT) - 1:-1], 2, dim=-1).values
        cls.margin = float((top2[:, 0] - top2[:, 1]).min())
        cls.greedy = out[0].tolist()
        cls.text = os.path.join(cls.dir, "text")
        cls.tool = run(sys.executable, TOOL, cls.full, cls.text)

    def test_reference_is_worth_comparing(self):
        self.assertGreaterEqual(len(set(self.greedy[len(PROMPT):])), 3, self.greedy)
        self.assertGreater(self.margin, 1e-2)

    def test_fsdpgen_refuses_the_checkpoint_and_names_the_tool(self):
        r = run(FSDPGEN, "import-hf", self.full)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("tools/gemma3_text.py", r.stdout + r.stderr)

    def test_text_model_imports_checks_and_samples_as_transformers_generates(self):
        self.assertEqual(self.tool.returncode, 0, self.tool.stdout + self.tool.stderr)
        self.assertIn("logits equal to", self.tool.stdout)
        spec = os.path.join(self.dir, "text.fsdp")
        r = run(FSDPGEN, "import-hf", self.text, "-o", spec)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(spec) as f:
            self.assertIn("  rope_scaling = linear(factor = 8)\n", f.read())
        r = run(FSDPGEN, "check", spec, "--hf", self.text)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = run(FSDPGEN, "sample", self.text, "--prompt-ids", ",".join(map(str, PROMPT)),
                "--tokens", str(NEW_TOKENS), "--temperature", "0")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(" ".join(map(str, self.greedy)), r.stdout, r.stdout)

    def test_refusals(self):
        self.assertEqual(self.tool.returncode, 0, self.tool.stderr)
        r = run(sys.executable, TOOL, self.full, self.text)
        self.assertEqual(r.returncode, 1)
        self.assertIn("exists and is not empty", r.stderr)
        r = run(sys.executable, TOOL, self.text, os.path.join(self.dir, "again"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("is already a text model", r.stderr)


if __name__ == "__main__":
    i = sys.argv.index("--fsdpgen")
    FSDPGEN = sys.argv[i + 1]
    del sys.argv[i:i + 2]
    unittest.main()
