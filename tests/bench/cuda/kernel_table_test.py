#!/usr/bin/env python3
"""kernel_table.py on a hand-written ncu CSV: times in three units (long and
short names) summed by kernel name (template arguments and parameter lists
dropped), shares of the step, the rows beyond --top summed, and an error for a
file without kernels."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
          '"Metric Value"\n')


def row(i, kernel, unit, value):
    return (f'"{i}","7","train","gpu","{kernel}","1","13","(256, 1, 1)","(64, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","gpu__time_duration.sum","{unit}","{value}"\n')


# One step: flash forward 1.5 ms + 2,500 us = 4 ms in two launches; a GEMM
# 3,000,000 ns = 3 ms; layernorm 1 ms. Total 8 ms.
SAMPLE = ("==PROF== Connected to process 7 (/work/train)\n"
          "==PROF== Profiling \"flash_forward\": 0%....50%....100% - 1 pass\n" + HEADER +
          row(0, "void flash_forward<__nv_bfloat16, 64>(const T1 *, float *, int)", "msecond",
              "1.5") +
          row(1, "void flash_forward<__nv_bfloat16, 64>(const T1 *, float *, int)", "usecond",
              "2,500") +
          row(2, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "nsecond",
              "3,000,000") +
          row(3, "layernorm_forward(float *, const float *, int)", "msecond", "1"))


def run(text, *args):
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(text)
    try:
        return subprocess.run([sys.executable, os.path.join(HERE, "kernel_table.py"), f.name,
                               *args], capture_output=True, text=True)
    finally:
        os.unlink(f.name)


class KernelTable(unittest.TestCase):
    def test_sums_launches_by_kernel_slowest_first(self):
        r = run(SAMPLE)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[2], "| `flash_forward` | 2 | 4.00 | 50.0% |")
        self.assertEqual(lines[3],
                         "| `sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64` | 1 "
                         "| 3.00 | 37.5% |")
        self.assertEqual(lines[4], "| `layernorm_forward` | 1 | 1.00 | 12.5% |")
        self.assertEqual(lines[-1], "| all kernels | 4 | 8.00 | 100% |")

    def test_rows_beyond_top_are_summed(self):
        r = run(SAMPLE, "--top", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| 2 others | 2 | 4.00 | 50.0% |", r.stdout)

    def test_short_units_of_newer_ncu(self):
        # Nsight Compute 2025 (CUDA 13, H100, 2026-11-26) writes "ns", "us", "ms".
        short = SAMPLE.replace('"msecond"', '"ms"').replace('"usecond"', '"us"').replace(
            '"nsecond"', '"ns"')
        r = run(short)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, run(SAMPLE).stdout)

    def test_a_file_without_kernels_is_an_error(self):
        r = run("==PROF== No kernels were profiled.\n")
        self.assertEqual(r.returncode, 1)
        self.assertIn("holds no gpu__time_duration.sum rows", r.stderr)


if __name__ == "__main__":
    unittest.main()
