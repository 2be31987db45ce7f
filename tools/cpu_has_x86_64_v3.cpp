// cpu_has_x86_64_v3: CMake's check (try_run) that this machine runs x86-64-v3
// code (AVX2, FMA, BMI2, F16C: Intel Haswell and AMD Zen onward); exits 0
// when it does. Compiled with -march=x86-64-v3, it uses no such instruction
// before asking.
int main() {
  __builtin_cpu_init();
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("f16c");
  return v3 ? 0 : 1;
}
