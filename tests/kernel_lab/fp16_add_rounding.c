// Whether the fp32 sum of two fp16 values, rounded to fp16, is always the exactly rounded sum (what a packed
// add.rn.f16x2 gives): every pair of finite fp16 values, on the CPU. fp32 keeps 24 bits, just 2p + 2 for fp16's
// p = 11, the bound below which rounding twice can differ from rounding once; bf16 (p = 8) is well inside it. The
// exact sum of two fp16 values has at most 40 significant bits, so a double holds it and one conversion rounds it
// once. Template developers' tool (gcc 12 or newer, for _Float16; about 8 minutes per half on one core):
//     gcc -O2 -o /tmp/fp16_add_rounding tests/kernel_lab/fp16_add_rounding.c -lm
//     /tmp/fp16_add_rounding 0 32768 & /tmp/fp16_add_rounding 32768 65536    # the first operand's bit patterns
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Float16 from_bits(uint16_t b) {
  _Float16 h;
  memcpy(&h, &b, 2);
  return h;
}
static uint16_t to_bits(_Float16 h) {
  uint16_t b;
  memcpy(&b, &h, 2);
  return b;
}

int main(int argc, char** argv) {
  const unsigned first = argc > 1 ? (unsigned)atoi(argv[1]) : 0, last = argc > 2 ? (unsigned)atoi(argv[2]) : 65536;
  unsigned long long pairs = 0, differ = 0;
  for (unsigned a = first; a < last; ++a) {
    const _Float16 x = from_bits((uint16_t)a);
    if (!isfinite((float)x)) continue;
    for (unsigned b = 0; b < 65536; ++b) {
      const _Float16 y = from_bits((uint16_t)b);
      if (!isfinite((float)y)) continue;
      const _Float16 twice = (_Float16)((float)x + (float)y);  // fp32 sum, then rounded to fp16
      const _Float16 once = (_Float16)((double)x + (double)y);  // the exact sum, rounded once
      ++pairs;
      if (to_bits(twice) != to_bits(once) && differ++ < 5) printf("differ: %a + %a\n", (double)x, (double)y);
    }
  }
  printf("fp16 add, first operands %u-%u: %llu pairs of finite values, %llu differ\n", first, last - 1, pairs, differ);
  return differ != 0;
}
