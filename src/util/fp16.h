/* IEEE half and bfloat16 <-> float conversions (exact, no SIMD). */
#ifndef TUTTI_UTIL_FP16_H
#define TUTTI_UTIL_FP16_H

#include <stdint.h>
#include <string.h>

static inline float tutti_bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t tutti_f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* IEEE 754 binary16 -> binary32, exact for normals, subnormals, inf and NaN. */
static inline float tutti_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return tutti_bits_to_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return tutti_bits_to_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float f = (float)man * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    return tutti_bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* binary32 -> binary16, round to nearest even. */
static inline uint16_t tutti_f32_to_fp16(float f) {
    uint32_t x = tutti_f32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow -> inf */
    if (ax < 0x38800000u) {                                  /* subnormal or zero in half */
        float a = tutti_bits_to_f32(ax) * 16777216.0f;       /* scale to units of 2^-24 */
        uint32_t m = (uint32_t)a;
        float r = a - (float)m;
        if (r > 0.5f || (r == 0.5f && (m & 1))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t h = ((ax >> 13) - (112u << 10));
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static inline float tutti_bf16_to_f32(uint16_t b) { return tutti_bits_to_f32((uint32_t)b << 16); }

static inline uint16_t tutti_f32_to_bf16(float f) {
    uint32_t x = tutti_f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64); /* quiet NaN */
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

#endif
